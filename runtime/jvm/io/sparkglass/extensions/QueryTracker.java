package io.sparkglass.extensions;

import com.fasterxml.jackson.databind.ObjectMapper;
import java.time.Instant;
import java.util.ArrayDeque;
import java.util.ArrayList;
import java.util.Collections;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.Set;
import java.util.concurrent.ConcurrentHashMap;
import org.apache.spark.sql.SparkSession;
import org.apache.spark.sql.streaming.StateOperatorProgress;
import org.apache.spark.sql.streaming.StreamingQueryListener;
import org.apache.spark.sql.streaming.StreamingQueryProgress;

/**
 * What the named streaming queries of this JVM did: running or not, their latest
 * micro-batches, and their live metrics. The round coordinator needs the micro-batches to wait
 * for them and to notice a query that stopped; the pipeline's metrics (GET /api/v1/progress)
 * need the totals since the start and the latest progress's figures. It is a listener on the
 * driver's listener bus, never on a task: the work is a few fields per micro-batch.
 *
 * <p>Totals are accumulated from each progress as it arrives, one micro-batch counted once (by
 * the query's id and batchId: a batch run again after a restart on the same checkpoint is not
 * counted twice), so they keep growing past Spark's {@code recentProgress} window and past
 * {@link #KEPT_BATCHES}.
 *
 * <p>One tracker listens to every session that ran a tapped query (Spark Connect and Spark
 * Declarative Pipelines run each client in a session of its own, with its own listener bus
 * registration), so Python can ask one place by query name.
 */
public final class QueryTracker extends StreamingQueryListener {
  /** Micro-batches kept per query (the coordinator asks about the last seconds only). */
  static final int KEPT_BATCHES = 64;

  private static final ObjectMapper JSON = new ObjectMapper();
  private static final QueryTracker INSTANCE = new QueryTracker();
  private static final Set<SparkSession> LISTENED =
      Collections.newSetFromMap(Collections.synchronizedMap(new java.util.WeakHashMap<>()));
  private static final Map<String, Query> QUERIES = new ConcurrentHashMap<>();
  private static final Map<String, String> NAME_OF_RUN = new ConcurrentHashMap<>();

  private static final class Query {
    volatile boolean running;
    volatile String exception;
    /** {startMs, endMs, outputRows (-1 unknown)} of the latest micro-batches. */
    final ArrayDeque<long[]> batches = new ArrayDeque<>();
    long total;
    /** Rows read (numInputRows) and written (the sink's numOutputRows; unknown: read). */
    long inputRowsTotal;
    long outputRowsTotal;
    /** The query id and latest batchId counted, and the run of the latest progress. */
    String queryId;
    long lastBatchId = -1;
    String runId;
    /** When the previous micro-batch of this run started (-1: none yet). */
    long previousStartMs = -1;
    /**
     * The input interval (see {@link #count}): when the latest micro-batch with input started,
     * and the sink rows and ms spent in the micro-batches since.
     */
    long lastInputStartMs = -1;
    long pendingRows;
    long pendingMs;
    double inputRate;
    double processedRate;
    double outputRate;
    double outputProcessedRate;
    /** True from an idle event (or the query's end) until its next micro-batch. */
    boolean quiet;
    /** The figures of the latest micro-batch (see {@link #json()}), null before the first. */
    Map<String, Object> last;
  }

  private QueryTracker() {}

  /** Listen to {@code session}'s queries (once per session). */
  static void listenTo(SparkSession session) {
    try {
      if (LISTENED.add(session)) {
        session.streams().addListener(INSTANCE);
      }
    } catch (Throwable e) {
      // Without the tracker a round is a plain window; the tap itself still works.
      io.sparkglass.sampling.TapErrors.record(e);
    }
  }

  @Override
  public void onQueryStarted(QueryStartedEvent event) {
    String name = event.name();
    if (name == null) {
      return;
    }
    NAME_OF_RUN.put(event.runId().toString(), name);
    Query q = QUERIES.computeIfAbsent(name, k -> new Query());
    q.running = true;
    q.exception = null;
  }

  @Override
  public void onQueryProgress(QueryProgressEvent event) {
    StreamingQueryProgress p = event.progress();
    if (p.name() == null) {
      return;
    }
    long start;
    try {
      start = Instant.parse(p.timestamp()).toEpochMilli();
    } catch (RuntimeException e) {
      start = System.currentTimeMillis() - p.batchDuration();
    }
    long rows = p.sink() == null ? -1 : p.sink().numOutputRows();
    Query q = QUERIES.computeIfAbsent(p.name(), k -> new Query());
    synchronized (q) {
      q.batches.addLast(new long[] {start, start + p.batchDuration(), rows});
      if (q.batches.size() > KEPT_BATCHES) {
        q.batches.removeFirst();
      }
      count(q, p, start, rows);
    }
  }

  /** Add one progress to the totals and keep its figures (held: {@code q}). */
  private static void count(Query q, StreamingQueryProgress p, long start, long rows) {
    String id = String.valueOf(p.id());
    String run = String.valueOf(p.runId());
    if (!id.equals(q.queryId)) { // another checkpoint under this name: its batchIds restart
      q.queryId = id;
      q.lastBatchId = -1;
    }
    if (!run.equals(q.runId)) {
      q.runId = run;
      q.previousStartMs = -1;
      q.lastInputStartMs = -1;
      q.pendingRows = 0;
      q.pendingMs = 0;
    }
    if (p.batchId() <= q.lastBatchId) {
      return; // counted already (a batch run again from the checkpoint)
    }
    q.lastBatchId = p.batchId();
    q.total++;
    q.quiet = false;
    // Spark times batches with the wall clock: one stepped back can make a duration negative.
    long duration = Math.max(0, p.batchDuration());
    long latency =
        q.previousStartMs >= 0 && start > q.previousStartMs
            ? start + duration - q.previousStartMs
            : duration;
    q.previousStartMs = start;
    long read = Math.max(0, p.numInputRows());
    q.inputRowsTotal += read;
    // The rows at the query's output: its sink's, or, from a sink that does not report them
    // (-1: the table sinks of Spark Declarative Pipelines' flows), the rows it read.
    long output = rows >= 0 ? rows : read;
    q.outputRowsTotal += output;
    q.pendingRows += output;
    q.pendingMs += Math.max(0, duration);
    // Rates over the latest input interval: from one micro-batch with input to the next (the
    // micro-batches Spark runs without input, to move a watermark, fall inside it and their
    // rows count there), as sparkglass.runtime.query_progress.QueryRates; for a stateless
    // query numInputRows over the time since the previous trigger, Spark's inputRowsPerSecond.
    if (read > 0 || q.lastInputStartMs < 0) {
      long interval =
          q.lastInputStartMs >= 0 && start > q.lastInputStartMs
              ? start - q.lastInputStartMs
              : duration;
      q.inputRate = perSecond(read, interval);
      q.processedRate = perSecond(read, q.pendingMs);
      q.outputRate = perSecond(q.pendingRows, interval);
      q.outputProcessedRate = perSecond(q.pendingRows, q.pendingMs);
      q.pendingRows = 0;
      q.pendingMs = 0;
      q.lastInputStartMs = start;
    }
    Map<String, Object> last = new LinkedHashMap<>();
    last.put("batchId", p.batchId());
    last.put("startMs", start);
    last.put("endMs", start + duration);
    last.put("numInputRows", p.numInputRows());
    last.put("outputRows", output);
    last.put("outputRowsFromSink", rows >= 0);
    last.put("inputRowsPerSecond", q.inputRate);
    last.put("processedRowsPerSecond", q.processedRate);
    last.put("outputRowsPerSecond", q.outputRate);
    last.put("outputProcessedRowsPerSecond", q.outputProcessedRate);
    last.put("batchDurationMs", duration);
    last.put("latencyMs", latency);
    last.put("watermarkMs", watermark(p));
    last.put("stateRows", stateRows(p));
    q.last = last;
  }

  private static double perSecond(long rows, long ms) {
    double x = ms > 0 ? rows * 1000.0 / ms : 0.0;
    return Double.isFinite(x) && x > 0 ? x : 0.0;
  }

  /** The progress's eventTime watermark in ms since the epoch, null when it has none. */
  private static Long watermark(StreamingQueryProgress p) {
    Map<String, String> eventTime = p.eventTime();
    String raw = eventTime == null ? null : eventTime.get("watermark");
    if (raw == null) {
      return null;
    }
    try {
      return Instant.parse(raw).toEpochMilli();
    } catch (RuntimeException e) {
      return null;
    }
  }

  /** Rows in state over the progress's stateful operators, null when it has none. */
  private static Long stateRows(StreamingQueryProgress p) {
    StateOperatorProgress[] operators = p.stateOperators();
    if (operators == null || operators.length == 0) {
      return null;
    }
    long total = 0;
    for (StateOperatorProgress op : operators) {
      total += Math.max(0, op.numRowsTotal());
    }
    return total;
  }

  @Override
  public void onQueryIdle(QueryIdleEvent event) {
    String name = NAME_OF_RUN.get(event.runId().toString());
    Query q = name == null ? null : QUERIES.get(name);
    if (q != null) {
      long at;
      try {
        at = Instant.parse(event.timestamp()).toEpochMilli();
      } catch (RuntimeException e) {
        at = -1;
      }
      synchronized (q) {
        q.quiet = true;
        // Spark counts intervals from the previous trigger, idle ones included: the next
        // micro-batch's rates and latency start here, not at the batch before the idle time.
        if (at > q.previousStartMs && q.previousStartMs >= 0) {
          q.previousStartMs = at;
        }
        if (at > q.lastInputStartMs && q.lastInputStartMs >= 0) {
          q.lastInputStartMs = at;
        }
      }
    }
  }

  @Override
  public void onQueryTerminated(QueryTerminatedEvent event) {
    String name = NAME_OF_RUN.remove(event.runId().toString());
    Query q = name == null ? null : QUERIES.get(name);
    if (q != null) {
      q.running = false;
      q.exception = event.exception().isDefined() ? event.exception().get() : null;
      synchronized (q) {
        q.quiet = true;
      }
    }
  }

  /**
   * The tracked queries as JSON: {@code {name: {"running", "exception", "microBatches",
   * "batches": [[startMs, endMs, outputRows]...], "inputRowsTotal", "outputRowsTotal",
   * "quiet", "last"}}}: {@code microBatches} and the totals since the query (by name) was first
   * seen; {@code quiet} whether it went idle or stopped after its latest micro-batch; {@code
   * last} that micro-batch's figures ({@code batchId, startMs, endMs, numInputRows, outputRows,
   * outputRowsFromSink (false: the sink reports no rows, outputRows are the rows read),
   * inputRowsPerSecond, processedRowsPerSecond, outputRowsPerSecond,
   * outputProcessedRowsPerSecond, batchDurationMs, latencyMs, watermarkMs, stateRows}: the
   * rates over the latest input interval, the input's and the sink rows'; the last two null
   * when the query has no watermark or no state), null before the first.
   */
  public static String json() throws Exception {
    Map<String, Object> out = new LinkedHashMap<>();
    for (Map.Entry<String, Query> e : QUERIES.entrySet()) {
      Query q = e.getValue();
      Map<String, Object> info = new LinkedHashMap<>();
      List<long[]> batches;
      long total;
      long inputRows;
      long outputRows;
      boolean quiet;
      Map<String, Object> last;
      synchronized (q) {
        batches = new ArrayList<>(q.batches);
        total = q.total;
        inputRows = q.inputRowsTotal;
        outputRows = q.outputRowsTotal;
        quiet = q.quiet;
        last = q.last; // replaced, never changed, after it was published
      }
      info.put("running", q.running);
      info.put("exception", q.exception);
      info.put("microBatches", total);
      info.put("batches", batches);
      info.put("inputRowsTotal", inputRows);
      info.put("outputRowsTotal", outputRows);
      info.put("quiet", quiet);
      info.put("last", last);
      out.put(e.getKey(), info);
    }
    return JSON.writeValueAsString(out);
  }

  /** Forgets every query (tests). */
  public static void clear() {
    QUERIES.clear();
    NAME_OF_RUN.clear();
  }
}
