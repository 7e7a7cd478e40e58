"""The jobs behind ``amps-pipeline``: each takes a Spark session and returns DataFrames (the
CLI writes them), so the same code runs from a notebook, a test, ``local[*]`` or a cluster.

* :func:`journal` -- the ``amps-journal`` DataFrame with the common options.
* :func:`export` -- the journal to Parquet/CSV/JSON partitioned by topic and date.
* :func:`queue_audit` -- per queue message: enqueue, leases, acks, cancels, expiries with
  latencies; and the per-queue summary.
* :func:`stats` -- counts, rates, sizes per topic and publisher; messages per second per
  topic; gaps in publisher sequences; queue depth over time.
* :func:`load` -- publish a dataset through the ``amps`` writer.
* ``sow_asof.sow_asof`` -- a SOW topic's state at a time T.
"""

from __future__ import annotations

from collections.abc import Iterator

from amps_emulator.journal.record import RecordKind

_QUEUE_KINDS = tuple(range(int(RecordKind.QUEUE_ACK), int(RecordKind.QUEUE_BATCH) + 1))
_EVENT_NAMES = {16: "ack", 17: "cancel", 18: "expire", 19: "lease", 20: "lease_expire"}


def journal(spark, path: str, topic: str | None = None, start: str | None = None,
            end: str | None = None, fail_on_data_loss: bool = True):
    r = spark.read.format("amps-journal").option("path", path) \
        .option("failOnDataLoss", str(fail_on_data_loss).lower())
    if topic:
        r = r.option("topic", topic)
    if start:
        r = r.option("startingTimestamp", start)
    if end:
        r = r.option("endingTimestamp", end)
    return r.load()


def for_text_formats(df):
    """Columns CSV cannot hold, as text: headers as JSON, binary bodies as base64."""
    from pyspark.sql import functions as F

    out = df
    for f in df.schema.fields:
        t = f.dataType.simpleString()
        if t.startswith("map") or t.startswith("struct") or t.startswith("array"):
            out = out.withColumn(f.name, F.to_json(F.col(f.name)))
        elif t == "binary":
            out = out.withColumn(f.name, F.base64(F.col(f.name)))
    return out


def write(df, out: str, fmt: str, partition_by=(), mode: str = "overwrite") -> None:
    if fmt == "csv":
        df = for_text_formats(df)
    w = df.write.mode(mode).format(fmt)
    if fmt == "csv":
        w = w.option("header", "true")
    if partition_by:
        w = w.partitionBy(*partition_by)
    w.save(out)


def export(spark, path: str, out: str, fmt: str = "parquet", **filters) -> int:
    """Journal rows to ``out`` partitioned by topic and date (UTC); returns the row count."""
    from pyspark.sql import functions as F

    df = journal(spark, path, **filters).withColumn("date", F.to_date("timestamp"))
    write(df, out, fmt, partition_by=("topic", "date"))
    return spark.read.format(fmt).option("header", "true").load(out).count() if fmt != "parquet" \
        else spark.read.parquet(out).count()


# ----------------------------------------------------------------------------- queues
_EVENT_DDL = "queue STRING, event STRING, message_position BIGINT, ts TIMESTAMP, reason STRING, " \
             "event_position BIGINT"


def _queue_events(batches: Iterator) -> Iterator:
    """mapInArrow: queue-event journal rows -> one row per event (batches unpacked)."""
    import msgspec
    import pyarrow as pa

    from amps_emulator.queues.events import decode_event

    unpack = msgspec.msgpack.Decoder(list[tuple[int, bytes]]).decode
    schema = pa.schema([("queue", pa.string()), ("event", pa.string()),
                        ("message_position", pa.int64()), ("ts", pa.timestamp("us", tz="UTC")),
                        ("reason", pa.string()), ("event_position", pa.int64())])
    for b in batches:
        d = b.to_pydict()
        cols: dict[str, list] = {n: [] for n in schema.names}
        for i in range(b.num_rows):
            kind, body = d["kind"][i], d["data_binary"][i] or (d["data"][i] or "").encode()
            pairs = unpack(body) if kind == int(RecordKind.QUEUE_BATCH) else [(kind, body)]
            for k, payload in pairs:
                if k not in _EVENT_NAMES:
                    continue
                ev = decode_event(k, payload)
                if ev.position is None:
                    continue  # a deferred ack for a message the queue had not seen yet
                cols["queue"].append(d["topic"][i])
                cols["event"].append(_EVENT_NAMES[k])
                cols["message_position"].append(ev.position)
                cols["ts"].append(d["ts"][i])
                cols["reason"].append(getattr(ev, "reason", None))
                cols["event_position"].append(d["position"][i])
        yield pa.RecordBatch.from_pydict(cols, schema=schema)


def queue_events(spark, path: str):
    from pyspark.sql import functions as F

    df = journal(spark, path).where(F.col("kind").isin(*_QUEUE_KINDS)) \
        .select("topic", "kind", "data", "data_binary", "position", F.col("timestamp").alias("ts"))
    return df.mapInArrow(_queue_events, _EVENT_DDL)


def _enqueued(queues):
    """mapInArrow: publish rows -> (queue, message_position) for every queue that takes the
    message: its UnderlyingTopic covers the topic (AMPS topic regex) and its Filter matches."""

    def run(batches: Iterator) -> Iterator:
        import msgspec
        import pyarrow as pa

        from amps_emulator.protocol.filter import compile_filter
        from amps_emulator.protocol.topics import compile_topic_regex, is_regex_topic

        tests = []
        for name, underlying, flt in queues:
            rx = compile_topic_regex(underlying) if is_regex_topic(underlying) else None
            covers = (underlying.__eq__ if rx is None else (lambda t, rx=rx: rx.search(t) is not None))
            tests.append((name, covers, compile_filter(flt) if flt else None))
        for b in batches:
            d = b.to_pydict()
            out: dict[str, list] = {"queue": [], "message_position": []}
            for topic, pos, data in zip(d["topic"], d["position"], d["data"], strict=False):
                doc = None
                for name, covers, f in tests:
                    if not covers(topic):
                        continue
                    if f is not None:
                        if doc is None:
                            try:
                                doc = msgspec.json.decode(data or "null")
                            except msgspec.DecodeError:
                                doc = False
                        if not f(doc):
                            continue
                    out["queue"].append(name)
                    out["message_position"].append(pos)
            yield pa.RecordBatch.from_pydict(out, schema=pa.schema(
                [("queue", pa.string()), ("message_position", pa.int64())]))

    return run


def queues_from_config(path: str) -> list[tuple[str, str, str | None]]:
    """(name, underlying topic, filter) of every queue in an AMPS config file."""
    from amps_emulator.config import load_config

    return [(q.name, q.underlying_topic or q.name, q.filter) for q in load_config(path).queues]


def queue_audit(spark, path: str, queues: list | None = None):
    """(per message, per queue summary). ``queues`` (:func:`queues_from_config`) adds the
    messages no consumer touched yet (state ``queued``); without it the audit lists the
    messages that have queue events. Leases carry no client: the journal records a lease
    only for at-most-once queues (its removal) and when full queue events are on."""
    from pyspark.sql import functions as F

    events = queue_events(spark, path)
    msgs = journal(spark, path).where(F.col("command").isin("publish", "delta_publish")) \
        .select(F.col("position").alias("message_position"), "bookmark", "topic",
                "client_name", F.col("timestamp").alias("enqueued_at"), "data")

    def first(name):
        return F.min(F.when(F.col("event") == name, F.col("ts")))

    def count(name):
        return F.sum(F.when(F.col("event") == name, 1).otherwise(0)).alias(name + "s")

    per = events.groupBy("queue", "message_position").agg(
        first("lease").alias("first_lease_at"), count("lease"), first("ack").alias("acked_at"),
        count("cancel"), count("lease_expire"), first("expire").alias("expired_at"),
        F.first(F.when(F.col("event") == "expire", F.col("reason")), ignorenulls=True).alias("expire_reason"))
    if queues:
        enq = journal(spark, path).where(F.col("command").isin("publish", "delta_publish")) \
            .select("topic", "position", "data") \
            .mapInArrow(_enqueued(queues), "queue STRING, message_position BIGINT")
        per = enq.join(per, ["queue", "message_position"], "full") \
            .fillna(0, subset=["leases", "cancels", "lease_expires"])
    audit = per.join(msgs, "message_position", "left").withColumn(
        "state", F.when(F.col("acked_at").isNotNull(), "acked")
        .when(F.col("expired_at").isNotNull(),
              F.when(F.col("expire_reason").isin("max_cancels", "max_deliveries"), "dead_letter")
              .otherwise("expired"))
        .when(F.col("first_lease_at").isNotNull(), "leased").otherwise("queued"))
    ms = lambda a, b: ((F.unix_micros(a) - F.unix_micros(b)) / 1000.0)  # noqa: E731
    audit = audit.withColumn("ms_to_first_lease", ms("first_lease_at", "enqueued_at")) \
        .withColumn("ms_to_ack", ms("acked_at", "enqueued_at"))
    summary = audit.groupBy("queue").agg(
        F.count("*").alias("messages"),
        F.sum(F.when(F.col("state") == "acked", 1).otherwise(0)).alias("acked"),
        F.sum(F.when(F.col("state").isin("expired", "dead_letter"), 1).otherwise(0)).alias("expired"),
        F.sum(F.when(F.col("state") == "dead_letter", 1).otherwise(0)).alias("dead_letter"),
        F.sum(F.col("cancels")).alias("cancels"),
        F.avg("ms_to_ack").alias("mean_ms_to_ack"),
        F.expr("percentile_approx(ms_to_ack, 0.5)").alias("p50_ms_to_ack"),
        F.expr("percentile_approx(ms_to_ack, 0.99)").alias("p99_ms_to_ack"))
    return audit.orderBy("queue", "message_position"), summary.orderBy("queue")


# ----------------------------------------------------------------------------- stats
def stats(spark, path: str, bucket_seconds: int = 1, **filters) -> dict:
    """DataFrames: ``by_publisher`` (topic x publisher), ``per_second`` (topic x time bucket),
    ``gaps`` (missing publisher sequences), ``queue_depth`` (queue x time bucket)."""
    from pyspark.sql import Window
    from pyspark.sql import functions as F

    df = journal(spark, path, **filters)
    pubs = df.where(F.col("kind") < 16)
    size = F.coalesce(F.octet_length("data"), F.octet_length("data_binary"))
    by_pub = pubs.groupBy("topic", "client_name", "publisher_id").agg(
        F.count("*").alias("messages"), F.sum(size).alias("bytes"), F.avg(size).alias("mean_size"),
        F.max(size).alias("max_size"), F.min("timestamp").alias("first"), F.max("timestamp").alias("last"),
    ).withColumn("per_second", F.col("messages") / F.greatest(
        F.lit(1e-6), (F.unix_micros("last") - F.unix_micros("first")) / 1e6))
    bucket = F.window("timestamp", f"{bucket_seconds} seconds")
    per_second = pubs.groupBy("topic", bucket).agg(F.count("*").alias("messages")) \
        .select("topic", F.col("window.start").alias("second"), "messages")
    w = Window.partitionBy("client_name").orderBy("client_seq")
    gaps = pubs.where(F.col("client_seq").isNotNull()).select("client_name", "client_seq", "timestamp") \
        .withColumn("prev", F.lag("client_seq").over(w)) \
        .where(F.col("client_seq") - F.col("prev") > 1) \
        .select("client_name", F.col("prev").alias("after_seq"), F.col("client_seq").alias("next_seq"),
                (F.col("client_seq") - F.col("prev") - 1).alias("missing"), "timestamp")
    ev = queue_events(spark, path)
    enq = ev.groupBy("queue", "message_position").agg(F.min("ts").alias("t")) \
        .join(df.select(F.col("position").alias("message_position"), F.col("timestamp").alias("pt")),
              "message_position", "left") \
        .select("queue", F.coalesce("pt", "t").alias("t"), F.lit(1).alias("delta"))
    done = ev.where(F.col("event").isin("ack", "expire")).groupBy("queue", "message_position") \
        .agg(F.min("ts").alias("t")).select("queue", "t", F.lit(-1).alias("delta"))
    second = F.window("t", f"{bucket_seconds} seconds").start.alias("second")
    steps = enq.unionByName(done).groupBy("queue", second).agg(F.sum("delta").alias("change"))
    depth = steps.withColumn("depth", F.sum("change").over(
        Window.partitionBy("queue").orderBy("second").rowsBetween(Window.unboundedPreceding, 0)))
    return {"by_publisher": by_pub.orderBy("topic", "client_name"),
            "per_second": per_second.orderBy("topic", "second"),
            "gaps": gaps.orderBy("client_name", "after_seq"),
            "queue_depth": depth.select("queue", "second", "depth").orderBy("queue", "second")}


# ----------------------------------------------------------------------------- load
def load(spark, source: str, fmt: str, uri: str, topic: str, data_column: str | None = None,
         load_id: str | None = None) -> int:
    """Publish every row of the dataset at ``source`` to ``topic``; returns the row count."""
    df = spark.read.format(fmt).load(source)
    w = df.write.format("amps").option("uri", uri).option("topic", topic).mode("append")
    if data_column:
        w = w.option("dataColumn", data_column)
    if load_id:
        w = w.option("loadId", load_id)
    w.save()
    return df.count()
