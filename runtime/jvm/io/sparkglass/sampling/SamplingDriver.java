package io.sparkglass.sampling;

import com.fasterxml.jackson.databind.ObjectMapper;
import java.util.ArrayList;
import java.util.HashMap;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.Set;
import java.util.TreeSet;
import java.util.concurrent.ConcurrentHashMap;

/**
 * Driver-side state of the sampling rounds, shared by the driver plugin (executor RPC) and
 * Python (through Py4J: the static methods below return JSON strings).
 *
 * <p>Python's RoundCoordinator decides admission, ids, completion and the result; this class
 * only fans rounds out to executors (they poll for them) and collects their reports. An
 * executor takes part in a round when it is alive at the round's start or picks the round up
 * later in a poll; it is alive while it polls at least every {@code livenessMs}.
 */
public final class SamplingDriver {
  private SamplingDriver() {}

  private static final ObjectMapper JSON = new ObjectMapper();
  private static volatile boolean active;
  private static volatile long applicationStartMs;
  /**
   * 15 s: an executor's poller (every 100 ms) can stall for seconds in a full GC or on a
   * saturated machine, and such a pause must not turn a round PARTIAL; an executor that
   * died is still declared lost long before the round's timeout. (5 s made a round PARTIAL
   * on a local cluster under a load of 12 on 2 cores.)
   */
  private static volatile long livenessMs = 15_000;
  private static final Map<String, long[]> EXECUTORS = new ConcurrentHashMap<>();
  private static final Map<String, DriverRound> ROUNDS = new ConcurrentHashMap<>();

  /** One round as the driver tracks it; windowEndMs is driver wall-clock ms. */
  private static final class DriverRound {
    final String roundId;
    final String tapKey;
    final long windowEndMs;
    final long samplingWindowMs;
    final int maxRate;
    final int maxRecordLength;
    final int budgetMs;
    final String program;
    volatile boolean cancelled;
    final Set<String> participants = ConcurrentHashMap.newKeySet();
    final RoundRecords records;
    final Map<String, Set<Integer>> progress = new ConcurrentHashMap<>();

    DriverRound(String roundId, String tapKey, long windowEndMs, long samplingWindowMs,
        int maxRate, int maxRecordLength, int budgetMs, String program, int responseCap) {
      this.samplingWindowMs = samplingWindowMs;
      this.program = program;
      this.records = new RoundRecords(responseCap);
      this.roundId = roundId;
      this.tapKey = tapKey;
      this.windowEndMs = windowEndMs;
      this.maxRate = maxRate;
      this.maxRecordLength = maxRecordLength;
      this.budgetMs = budgetMs;
    }
  }

  static void activate(long startMs) {
    applicationStartMs = startMs;
    EXECUTORS.clear();
    ROUNDS.clear();
    active = true;
  }

  static void deactivate() {
    active = false;
    ROUNDS.clear();
    EXECUTORS.clear();
  }

  /** True when the driver plugin runs in this JVM (sampling can work). */
  public static boolean isActive() {
    return active;
  }

  /** The SparkContext start time, ms since the epoch (a prefix for unique round ids). */
  public static long applicationStartMs() {
    return applicationStartMs;
  }

  /** How long an executor may stay silent before it counts as lost, ms. */
  public static void setLivenessMs(long ms) {
    livenessMs = ms;
  }

  private static Set<String> aliveExecutors(long now) {
    Set<String> alive = new TreeSet<>();
    for (Map.Entry<String, long[]> e : EXECUTORS.entrySet()) {
      if (now - e.getValue()[1] <= livenessMs) {
        alive.add(e.getKey());
      }
    }
    return alive;
  }

  /**
   * Starts a round on every live executor (they pick it up within one poll interval);
   * {@code program} is the round's compiled {@link RowProgram} (base64; null: every column of
   * the tap, no filter), {@code responseCap} the most records its result can hold (the driver
   * keeps no more than that cut needs, see {@link RoundRecords}).
   * Returns JSON {@code {"participants": [executorId...]}}.
   */
  public static String startRound(String roundId, String tapKey, long windowMs, int maxRate,
      int maxRecordLength, int budgetMs, String program, int responseCap) throws Exception {
    return startRound(roundId, tapKey, windowMs, windowMs, maxRate, maxRecordLength, budgetMs,
        program, responseCap);
  }

  /**
   * As above, with the round's {@code samplingWindowMs} apart from how long executors capture
   * ({@code windowMs}, longer when a round on a streaming vertex waits for a micro-batch): the
   * rate limit allows {@code maxRate × (samplingWindowMs + 1 s)} records per partition.
   */
  public static String startRound(String roundId, String tapKey, long windowMs,
      long samplingWindowMs, int maxRate, int maxRecordLength, int budgetMs, String program,
      int responseCap) throws Exception {
    long now = System.currentTimeMillis();
    DriverRound round = new DriverRound(roundId, tapKey, now + windowMs,
        Math.min(windowMs, samplingWindowMs), maxRate, maxRecordLength, budgetMs, program,
        responseCap);
    round.participants.addAll(aliveExecutors(now));
    ROUNDS.put(roundId, round);
    Map<String, Object> out = new LinkedHashMap<>();
    out.put("participants", new ArrayList<>(round.participants));
    return JSON.writeValueAsString(out);
  }

  /** Ends a round early: executors stop capturing and report at their next poll. */
  public static void cancelRound(String roundId) {
    DriverRound round = ROUNDS.get(roundId);
    if (round != null) {
      round.cancelled = true;
    }
  }

  /** Drops a round's state once Python has its result. */
  public static void forgetRound(String roundId) {
    ROUNDS.remove(roundId);
  }

  /**
   * A round's progress as JSON: participants, reported, alive executors, and per executor the
   * partitions it saw in this round. {@code {"known": false}} for an unknown round.
   */
  public static String roundStatus(String roundId) throws Exception {
    DriverRound round = ROUNDS.get(roundId);
    Map<String, Object> out = new LinkedHashMap<>();
    out.put("known", round != null);
    if (round != null) {
      long now = System.currentTimeMillis();
      out.put("participants", new TreeSet<>(round.participants));
      out.put("reported", round.records.reported());
      out.put("received", round.records.received());
      out.put("alive", aliveExecutors(now));
      Map<String, Object> progress = new LinkedHashMap<>();
      for (Map.Entry<String, Set<Integer>> e : round.progress.entrySet()) {
        progress.put(e.getKey(), new TreeSet<>(e.getValue()));
      }
      out.put("progress", progress);
      out.put("windowEndMs", round.windowEndMs);
    }
    return JSON.writeValueAsString(out);
  }

  /**
   * The executors' reports of a round, merged and cut down by {@link RoundRecords}, as JSON
   * {@code {"reports": {"driver": [partition...]}}} (empty for an unknown round).
   */
  public static String roundReports(String roundId) throws Exception {
    DriverRound round = ROUNDS.get(roundId);
    Map<String, Object> reports = new HashMap<>();
    if (round != null) {
      reports.put("driver", round.records.toReport());
    }
    Map<String, Object> out = new LinkedHashMap<>();
    out.put("reports", reports);
    return JSON.writeValueAsString(out);
  }

  /** Known executors as JSON {@code {executorId: {"pid": n, "silentMs": n}}}. */
  public static String executors() throws Exception {
    long now = System.currentTimeMillis();
    Map<String, Object> out = new LinkedHashMap<>();
    for (Map.Entry<String, long[]> e : EXECUTORS.entrySet()) {
      Map<String, Object> info = new LinkedHashMap<>();
      info.put("pid", e.getValue()[0]);
      info.put("silentMs", now - e.getValue()[1]);
      out.put(e.getKey(), info);
    }
    return JSON.writeValueAsString(out);
  }

  /**
   * Handles one executor message (see {@link Messages}); never throws to the RPC layer (a
   * message it cannot read answers null, which the executor takes as "no rounds").
   */
  static Object receive(Object message) {
    try {
      return handle(message);
    } catch (RuntimeException e) {
      return null;
    }
  }

  @SuppressWarnings("unchecked")
  private static Object handle(Object message) {
    if (!(message instanceof Map)) {
      return null;
    }
    Map<String, Object> msg = (Map<String, Object>) message;
    String executorId = String.valueOf(msg.get(Messages.EXECUTOR_ID));
    long now = System.currentTimeMillis();
    Object pid = msg.get(Messages.PID);
    EXECUTORS.put(executorId, new long[] {pid instanceof Number ? ((Number) pid).longValue() : -1,
        now});
    if (Messages.REPORT.equals(msg.get(Messages.TYPE))) {
      DriverRound round = ROUNDS.get(String.valueOf(msg.get(Messages.ROUND_ID)));
      if (round != null) {
        round.participants.add(executorId);
        round.records.add(executorId, msg.get(Messages.PARTITIONS));  // a second one is ignored
      }
      return Boolean.TRUE;
    }
    Object progress = msg.get(Messages.PROGRESS);
    if (progress instanceof Map) {
      for (Map.Entry<String, Object> e : ((Map<String, Object>) progress).entrySet()) {
        DriverRound round = ROUNDS.get(e.getKey());
        if (round != null && e.getValue() instanceof List) {
          Set<Integer> seen = round.progress.computeIfAbsent(executorId,
              k -> ConcurrentHashMap.newKeySet());
          for (Object p : (List<Object>) e.getValue()) {
            if (p instanceof Number) {
              seen.add(((Number) p).intValue());
            }
          }
        }
      }
    }
    List<Object> rounds = new ArrayList<>();
    for (DriverRound round : ROUNDS.values()) {
      if (round.records.hasReported(executorId)) {
        continue;
      }
      round.participants.add(executorId);
      HashMap<String, Object> spec = new HashMap<>();
      spec.put(Messages.ROUND_ID, round.roundId);
      spec.put(Messages.TAP_KEY, round.tapKey);
      spec.put(Messages.REMAINING_MS, Math.max(0L, round.windowEndMs - now));
      spec.put(Messages.WINDOW_MS, round.samplingWindowMs);
      spec.put(Messages.MAX_RATE, round.maxRate);
      spec.put(Messages.MAX_RECORD_LENGTH, round.maxRecordLength);
      spec.put(Messages.BUDGET_MS, round.budgetMs);
      spec.put(Messages.CANCELLED, round.cancelled);
      if (round.program != null) {
        spec.put(Messages.PROGRAM, round.program);
      }
      rounds.add(spec);
    }
    HashMap<String, Object> reply = new HashMap<>();
    reply.put(Messages.ROUNDS, rounds);
    return reply;
  }
}
