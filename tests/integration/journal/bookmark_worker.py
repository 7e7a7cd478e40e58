"""A stateless worker process for the MMapBookmarkStore test (run as a separate process).

usage: bookmark_worker.py URI STORE_FILE TOPIC DISCARD STOP

Subscribes from the store's most recent bookmark, discards the first DISCARD messages it
processes, reads STOP messages in all, prints the ``i`` of each on one JSON line and exits.
"""

import json
import sys
import threading

import AMPS


def main() -> None:
    uri, store_file, topic, discard, stop = sys.argv[1:6]
    discard, stop = int(discard), int(stop)
    store = AMPS.MMapBookmarkStore(store_file)
    client = AMPS.Client("bookmark-worker")
    client.set_bookmark_store(store)
    client.connect(uri)
    client.logon(5000)
    got: list[int] = []
    done = threading.Event()

    def on_message(m) -> None:
        if done.is_set():
            return
        got.append(json.loads(m.get_data())["i"])
        if len(got) <= discard:
            store.discard_message(m)
        if len(got) >= stop:
            done.set()

    client.bookmark_subscribe(on_message, topic, AMPS.Client.Bookmarks.MOST_RECENT,
                              sub_id="worker-sub", timeout=5000)
    ok = done.wait(20)
    client.close()
    print(json.dumps({"ok": ok, "got": got}), flush=True)


if __name__ == "__main__":
    main()
