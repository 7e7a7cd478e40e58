"""Aggregated SOW queries (``grouping`` / ``projection`` options) through the official client."""

from __future__ import annotations

import json

import AMPS
import pytest

from tests.support.clients import Inbox

SOW_XML = """<SOW>
  <Topic><Name>orders</Name><MessageType>json</MessageType><Key>/id</Key>
    <FileName>{d}/sow/%n.sow</FileName></Topic>
  <Topic><Name>orders-eu</Name><MessageType>json</MessageType><Key>/id</Key>
    <FileName>{d}/sow/%n.sow</FileName></Topic>
  <Topic><Name>hist</Name><MessageType>json</MessageType><Key>/id</Key>
    <FileName>{d}/sow/%n.sow</FileName>
    <History><Window>1d</Window><Granularity>0s</Granularity></History></Topic>
  <Queue><Name>jobs</Name><MessageType>json</MessageType><LeasePeriod>10s</LeasePeriod></Queue>
</SOW>"""

ORDERS = [
    {"id": 1, "sym": "IBM", "desk": "a", "qty": 100, "px": 10.0},
    {"id": 2, "sym": "IBM", "desk": "b", "qty": 50, "px": 12.0},
    {"id": 3, "sym": "MSFT", "desk": "a", "qty": 10, "px": 300.0},
    {"id": 4, "sym": "AAPL", "desk": "a", "qty": 7, "px": 150.0},
    {"id": 5, "sym": "MSFT", "desk": "b", "qty": 30, "px": 310.0},
    {"id": 6, "sym": "IBM", "desk": "a", "px": 11.0},  # no qty: NULL for SUM/COUNT
]


@pytest.fixture
def aggregate_clients(clients_with):
    return clients_with(SOW_XML)


def publish_orders(c) -> None:
    for o in ORDERS:
        c.publish("orders", json.dumps(o))
    c.flush(5000)


def run(c, cmd: AMPS.Command) -> tuple[list[tuple[str, dict]], AMPS.Message | None]:
    """The ``sow`` records (key, body) and the ``completed`` ack of a query."""
    rows, completed = [], None
    for m in c.execute(cmd.add_ack_type("completed")):
        if m.get_command() == "sow":
            rows.append((m.get_sow_key(), json.loads(m.get_data())))
        elif m.get_command() == "ack" and m.get_ack_type() == "completed":
            completed = m
    return rows, completed


def counts(ack: AMPS.Message) -> tuple[int, int, int]:
    return (int(ack.get_records_returned()), int(ack.get_matches()),
            int(ack.get_topic_matches()))


def test_one_record_per_group_with_sums_and_counts(aggregate_clients):
    c = aggregate_clients()
    publish_orders(c)
    cmd = AMPS.Command("sow").set_topic("orders").set_batch_size(2).set_options(
        "grouping=[/sym],projection=[/sym,SUM(/qty) AS /total,COUNT(/qty) AS /n,"
        "SUM(/qty * /px) / SUM(/qty) AS /vwap,MAX(/px) AS /stats/hi,MIN(/px) AS /stats/lo]")
    rows, completed = run(c, cmd)
    by_sym = {r["sym"]: r for _, r in rows}
    assert by_sym == {
        "IBM": {"sym": "IBM", "total": 150, "n": 2, "vwap": (1000 + 600) / 150,
                "stats": {"hi": 12.0, "lo": 10.0}},
        "MSFT": {"sym": "MSFT", "total": 40, "n": 2, "vwap": (3000 + 9300) / 40,
                 "stats": {"hi": 310.0, "lo": 300.0}},
        "AAPL": {"sym": "AAPL", "total": 7, "n": 1, "vwap": 150.0,
                 "stats": {"hi": 150.0, "lo": 150.0}},
    }
    keys = [k for k, _ in rows]
    assert len(set(keys)) == 3 and all(k for k in keys)
    assert counts(completed) == (3, 6, 6)
    # the same group gets the same SowKey in a later query
    again, _ = run(c, AMPS.Command("sow").set_topic("orders").set_options(
        "grouping=[/sym],projection=[/sym]"))
    assert {r["sym"]: k for k, r in again} == {r["sym"]: k for k, r in rows}


def test_filter_restricts_the_input_and_grouping_by_two_fields(aggregate_clients):
    c = aggregate_clients()
    publish_orders(c)
    cmd = AMPS.Command("sow").set_topic("orders").set_filter("/px < 200").set_options(
        "grouping=[/sym,/desk],projection=[/sym,/desk,COUNT(/id) AS /orders,"
        "AVG(/px) AS /avgPx]")
    rows, completed = run(c, cmd)
    got = sorted((r["sym"], r["desk"], r["orders"], r["avgPx"]) for _, r in rows)
    assert got == [("AAPL", "a", 1, 150.0), ("IBM", "a", 2, 10.5), ("IBM", "b", 1, 12.0)]
    assert counts(completed) == (3, 4, 6)


def test_orderby_top_n_and_skip_n_apply_to_the_aggregates(aggregate_clients):
    c = aggregate_clients()
    publish_orders(c)
    opts = "grouping=[/sym],projection=[/sym,SUM(/qty) AS /total]"
    cmd = AMPS.Command("sow").set_topic("orders").set_options(opts).set_order_by("/total DESC")
    rows, completed = run(c, cmd)
    assert [(r["sym"], r["total"]) for _, r in rows] == [("IBM", 150), ("MSFT", 40), ("AAPL", 7)]
    cmd = AMPS.Command("sow").set_topic("orders").set_options(opts).set_order_by(
        "/total DESC").set_top_n(2)
    rows, completed = run(c, cmd)
    assert [r["sym"] for _, r in rows] == ["IBM", "MSFT"]
    assert counts(completed) == (2, 6, 6)
    cmd = AMPS.Command("sow").set_topic("orders").set_options(
        opts + ",skip_n=1,top_n=1").set_order_by("/sym")
    rows, _ = run(c, cmd)
    assert [r["sym"] for _, r in rows] == ["IBM"]


def test_timestamp_no_sowkey_and_empty_topic(aggregate_clients):
    c = aggregate_clients()
    rows, completed = run(c, AMPS.Command("sow").set_topic("orders").set_options(
        "grouping=[/sym],projection=[/sym,COUNT(/id) AS /n]"))
    assert rows == [] and counts(completed) == (0, 0, 0)
    publish_orders(c)
    msgs = [m for m in c.execute(AMPS.Command("sow").set_topic("orders").set_options(
        "grouping=[/desk],projection=[/desk,COUNT(/id) AS /n],timestamp"))
        if m.get_command() == "sow"]
    assert sorted((json.loads(m.get_data())["desk"], json.loads(m.get_data())["n"])
                  for m in msgs) == [("a", 4), ("b", 2)]
    assert all(m.get_timestamp().endswith("Z") for m in msgs)


def test_queue_contents_can_be_aggregated_without_consuming(aggregate_clients):
    c = aggregate_clients()
    for i in range(5):
        c.publish("jobs", json.dumps({"kind": "x" if i % 2 else "y", "cost": i}))
    c.flush(5000)
    rows, completed = run(c, AMPS.Command("sow").set_topic("jobs").set_options(
        "grouping=[/kind],projection=[/kind,SUM(/cost) AS /cost]"))
    assert sorted((r["kind"], r["cost"]) for _, r in rows) == [("x", 4), ("y", 6)]
    assert counts(completed) == (2, 5, 5)
    again, _ = run(c, AMPS.Command("sow").set_topic("jobs").set_options(
        "grouping=[/kind],projection=[/kind,COUNT(/cost) AS /n]"))
    assert sorted((r["kind"], r["n"]) for _, r in again) == [("x", 2), ("y", 3)]


def test_a_bookmark_aggregates_the_historical_state(aggregate_clients):
    c = aggregate_clients()
    for i in (1, 2, 3):
        c.publish("hist", json.dumps({"id": i, "g": "x", "q": i}))
    c.flush(5000)
    then = max(m.get_timestamp() for m in c.execute(
        AMPS.Command("sow").set_topic("hist").set_options("timestamp"))
        if m.get_command() == "sow")
    c.publish("hist", json.dumps({"id": 1, "g": "x", "q": 100}))
    c.publish("hist", json.dumps({"id": 4, "g": "y", "q": 5}))
    c.flush(5000)
    opts = "grouping=[/g],projection=[/g,SUM(/q) AS /q,COUNT(/id) AS /n]"
    now, _ = run(c, AMPS.Command("sow").set_topic("hist").set_options(opts))
    assert sorted(tuple(r.values()) for _, r in now) == [("x", 105, 3), ("y", 5, 1)]
    past, completed = run(c, AMPS.Command("sow").set_topic("hist").set_options(opts)
                          .set_bookmark(then))
    assert [r for _, r in past] == [{"g": "x", "q": 6, "n": 3}]
    assert counts(completed) == (1, 3, 3)


@pytest.mark.parametrize("options", [
    "grouping=[/sym]",                                  # no projection
    "projection=[/sym,SUM(/qty) AS /total]",            # no grouping
    "grouping=[/sym],projection=[SUM(/qty)]",           # an expression needs AS
    "grouping=[/sym],projection=[/sym,SUM(SUM(/qty)) AS /t]",
    "grouping=[/sym],projection=[/sym,SUM(/qty,/px) AS /t]",
    "grouping=[/sym],projection=[/sym,NOSUCH(/qty) AS /t]",
    "grouping=[SUM(/qty)],projection=[/sym]",
    "grouping=[/sym],projection=[/sym,/qty AS /sym/x]",  # overlapping targets
    "grouping=[/sym],projection=[/sym],select=[-/,+/sym]",
])
def test_bad_options_fail_with_invalid_options(aggregate_clients, options):
    c = aggregate_clients()
    publish_orders(c)
    with pytest.raises(AMPS.InvalidOptionsException):
        run(c, AMPS.Command("sow").set_topic("orders").set_options(options))
    assert len(run(c, AMPS.Command("sow").set_topic("orders"))[0]) == 6  # still usable


def test_regex_topics_and_bad_filters_are_refused(aggregate_clients):
    c = aggregate_clients()
    publish_orders(c)
    opts = "grouping=[/sym],projection=[/sym,COUNT(/id) AS /n]"
    with pytest.raises(AMPS.BadRegexTopicException):
        run(c, AMPS.Command("sow").set_topic("^orders").set_options(opts))
    with pytest.raises(AMPS.InvalidOptionsException):
        run(c, AMPS.Command("sow_and_subscribe").set_topic("^orders").set_options(opts))
    with pytest.raises(AMPS.BadFilterException):
        run(c, AMPS.Command("sow").set_topic("orders").set_filter("/sym = = 1").set_options(opts))
    with pytest.raises(AMPS.InvalidOrderByException):
        run(c, AMPS.Command("sow").set_topic("orders").set_options(opts).set_order_by("/n UP"))


def Groups(c, command: str, opts: str, flt: str | None = None) -> Inbox:
    """An aggregated subscription's messages (see :class:`Inbox`)."""
    cmd = AMPS.Command(command).set_topic("orders").set_options(opts).set_batch_size(10)
    if flt:
        cmd.set_filter(flt)
    return Inbox.of(c, cmd)


def test_an_aggregated_subscription_keeps_its_groups_up_to_date(aggregate_clients):
    c = aggregate_clients()
    publish_orders(c)
    g = Groups(c, "sow_and_subscribe",
               "oof,grouping=[/sym],projection=[/sym,SUM(/qty) AS /qty,COUNT(/id) AS /n]",
               "/desk = 'a'")
    assert sorted((k, d["sym"], d["qty"], d["n"]) for k, d in g.take()) == [
        ("sow", "AAPL", 7, 1), ("sow", "IBM", 100, 2), ("sow", "MSFT", 10, 1)]
    c.publish("orders", json.dumps({"id": 7, "sym": "IBM", "desk": "a", "qty": 5}))
    assert g.take() == [("p", {"sym": "IBM", "qty": 105, "n": 3})]
    # 3 moves from MSFT to AAPL: MSFT is empty (out of focus), AAPL grows
    c.publish("orders", json.dumps({"id": 3, "sym": "AAPL", "desk": "a", "qty": 10}))
    assert g.take() == [("oof", {"sym": "MSFT", "qty": 10, "n": 1}),
                        ("p", {"sym": "AAPL", "qty": 17, "n": 2})]
    # a record outside the filter changes nothing; one leaving the filter shrinks its group
    c.publish("orders", json.dumps({"id": 5, "sym": "MSFT", "desk": "b", "qty": 1}))
    c.publish("orders", json.dumps({"id": 4, "sym": "AAPL", "desk": "b", "qty": 7}))
    assert g.take() == [("p", {"sym": "AAPL", "qty": 10, "n": 1})]
    # deleting the last record of a group: out of focus, reason deleted
    c.sow_delete("orders", "/id = 3", 5000)
    assert g.take() == [("oof", {"sym": "AAPL", "qty": 10, "n": 1})]


def test_an_aggregated_delta_subscription_sends_what_changed(aggregate_clients):
    c = aggregate_clients()
    publish_orders(c)
    g = Groups(c, "sow_and_delta_subscribe",
               "grouping=[/sym],projection=[/sym,SUM(/qty) AS /qty,MAX(/px) AS /px]")
    assert len(g.take()) == 3
    c.publish("orders", json.dumps({"id": 8, "sym": "MSFT", "desk": "a", "qty": 1, "px": 1}))
    assert g.take() == [("p", {"sym": "MSFT", "qty": 41})]  # px (MAX) did not change


AGG = "oof,grouping=[/sym],projection=[/sym,SUM(/qty) AS /qty]"


@pytest.mark.parametrize("command, options, flt", [
    ("sow_and_subscribe", AGG, "/desk = 'b'"),                            # another filter
    ("sow_and_subscribe", AGG.replace("SUM", "MAX"), "/desk = 'a'"),      # another projection
    ("sow_and_subscribe", "oof", "/desk = 'a'"),                         # no aggregation
    ("sow_and_delta_subscribe", AGG, "/desk = 'a'"),                      # another command
    ("subscribe", "", None),                                              # a plain subscribe
])
def test_a_replace_of_an_aggregated_subscription_changes_only_its_pagination(
        aggregate_clients, command, options, flt):
    """AMPS: a subscription using per-subscription aggregation supports ``replace`` only to
    change its pagination; any other replace fails (invalid options), the groups go on."""
    c = aggregate_clients()
    publish_orders(c)
    first = AMPS.Command("sow_and_subscribe").set_topic("orders").set_sub_id("agg") \
        .set_options(AGG).set_filter("/desk = 'a'").set_batch_size(10)
    g = Inbox.of(c, first)
    assert len(g.take()) == 3
    # (the client forgets the handler of a sub_id whose command failed: still collected)
    c.set_unhandled_message_handler(lambda m: g.q.put((m.get_command(), m.get_data())))
    other = AMPS.Command(command).set_topic("orders").set_sub_id("agg") \
        .set_options(",".join(o for o in ("replace", options) if o))
    if flt:
        other.set_filter(flt)
    with pytest.raises(AMPS.InvalidOptionsException):
        run(c, other)
    c.publish("orders", json.dumps({"id": 7, "sym": "IBM", "desk": "a", "qty": 5}))
    assert g.take() == [("p", {"sym": "IBM", "qty": 105})]
    # changing the pagination is a replace it takes: the query again, top_n of it
    paged = AMPS.Command("sow_and_subscribe").set_topic("orders").set_sub_id("agg") \
        .set_options("replace," + AGG).set_filter("/desk = 'a'").set_top_n(1) \
        .set_order_by("/qty DESC")
    assert Inbox.of(c, paged).take() == [("sow", {"sym": "IBM", "qty": 105})]


def test_a_plain_subscription_cannot_be_replaced_by_an_aggregated_one(aggregate_clients):
    c = aggregate_clients()
    publish_orders(c)
    plain = Inbox.of(c, AMPS.Command("sow_and_subscribe").set_topic("orders").set_sub_id("s"))
    assert len(plain.take()) == 6
    c.set_unhandled_message_handler(lambda m: plain.q.put((m.get_command(), m.get_data())))
    with pytest.raises(AMPS.InvalidOptionsException):
        run(c, AMPS.Command("sow_and_subscribe").set_topic("orders").set_sub_id("s")
            .set_options("replace," + AGG))
    c.publish("orders", json.dumps({"id": 9, "sym": "X", "desk": "a", "qty": 1}))
    assert plain.take() == [("p", {"id": 9, "sym": "X", "desk": "a", "qty": 1})]


def test_records_one_delete_removes_change_each_group_once(aggregate_clients):
    """A ``sow_delete`` of several records of a group sends the group once, as it is after
    the delete (not once per record)."""
    c = aggregate_clients()
    publish_orders(c)
    g = Groups(c, "sow_and_subscribe", "grouping=[/sym],projection=[/sym,COUNT(/id) AS /n]")
    assert len(g.take()) == 3
    c.sow_delete("orders", "/id IN (1, 2, 3)", 5000)  # two of IBM's three, one of MSFT's two
    assert sorted(d["sym"] for _, d in g.take()) == ["IBM", "MSFT"]
