"""Helpers shared by the tests (and a few benches). Import from here, never from a test file.

* :mod:`~tests.support.servers`: a server in this process (``start_server``, ``ServerThread``,
  ``config_xml``, ``until``, ``turn_held``);
* :mod:`~tests.support.procserver`: a server as a child process (``ProcServer``, ``free_port``);
* :mod:`~tests.support.clients`: the official Python client (``client_for``, ``logged_on``,
  ``Collector``, ``Inbox``, ``store_client``, ``ha_client``, ...);
* :mod:`~tests.support.js_client`: the official JavaScript client under Node (``run_js``);
* :mod:`~tests.support.raw`: a raw-socket AMPS peer (``RawClient``);
* :mod:`~tests.support.fakes`: a connection without sockets or loop (``connection``,
  ``FakeLoop``);
* :mod:`~tests.support.entitlements`, :mod:`~tests.support.replication_nodes`,
  :mod:`~tests.support.samples`, :mod:`~tests.support.filter_corpus`: configs and data of one
  area used by tests of several;
* :mod:`~tests.support.tls` (a throwaway certificate), :mod:`~tests.support.compiled` (the
  compiled extension or a skip), :mod:`~tests.support.fuzz` (the frame fuzzer),
  :mod:`~tests.support.paths` (the repository, ``tests/fixtures``, ``tests/js``).
"""
