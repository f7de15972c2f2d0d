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
import org.apache.spark.sql.streaming.StreamingQueryListener;
import org.apache.spark.sql.streaming.StreamingQueryProgress;

/**
 * What the named streaming queries of this JVM did: running or not, and their latest
 * micro-batches. The round coordinator needs it to wait for micro-batches and to notice a
 * query that stopped; it is a listener on the driver's listener bus, never on a task.
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
      q.total++;
    }
  }

  @Override
  public void onQueryTerminated(QueryTerminatedEvent event) {
    String name = NAME_OF_RUN.remove(event.runId().toString());
    Query q = name == null ? null : QUERIES.get(name);
    if (q != null) {
      q.running = false;
      q.exception = event.exception().isDefined() ? event.exception().get() : null;
    }
  }

  /**
   * The tracked queries as JSON: {@code {name: {"running", "exception", "microBatches",
   * "batches": [[startMs, endMs, outputRows]...]}}}.
   */
  public static String json() throws Exception {
    Map<String, Object> out = new LinkedHashMap<>();
    for (Map.Entry<String, Query> e : QUERIES.entrySet()) {
      Query q = e.getValue();
      Map<String, Object> info = new LinkedHashMap<>();
      List<long[]> batches;
      long total;
      synchronized (q) {
        batches = new ArrayList<>(q.batches);
        total = q.total;
      }
      info.put("running", q.running);
      info.put("exception", q.exception);
      info.put("microBatches", total);
      info.put("batches", batches);
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
