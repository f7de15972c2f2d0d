package io.sparkglass.sampling;

import java.util.ArrayList;
import java.util.Comparator;
import java.util.HashSet;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.Set;
import java.util.TreeMap;
import java.util.TreeSet;

/**
 * The records of one round as the driver keeps them: the executors' reports merged per
 * partition, each partition cut down as reports arrive to what the response can still use.
 *
 * <p>The response keeps at most {@code responseCap} records, each partition's share
 * proportional to the records it captured: {@code floor(n_i * cap / N)} plus at most one of
 * the leftover slots (Python's {@code fair_truncate}). N only grows as reports arrive, so a
 * partition never needs more than {@code floor(n_i * cap / N_now) + 1} of its earliest
 * records; the rest are dropped here, and the captured count {@code n_i} travels on so that
 * the final cut is the one the untrimmed reports would have given. Without this a round over
 * 10,000 partitions kept 643,438 records (712 MB of driver heap) to answer with 5,000.
 * One exception: a partition reported again (a retried task) grows its n_i after its
 * records may have been cut, so it keeps the right number of records but not always the
 * earliest of both reports.
 *
 * <p>What stays is at most {@code responseCap + partitions} records of at most
 * {@code maxRecordLength} characters each, whatever the number of executors. Not on the hot
 * path (one call per executor report), so plain synchronization.
 */
final class RoundRecords {
  /** Key of a partition's captured-record count in {@link #toReport()}'s maps. */
  static final String CAPTURED = "capturedRecords";

  private static final Comparator<Object> BY_TIMESTAMP =
      Comparator.comparingLong(RoundRecords::timestamp);

  private final int responseCap;
  private final Map<Integer, Part> parts = new TreeMap<>();
  private final Set<String> reporters = new HashSet<>();
  /** Records captured, all partitions (N). */
  private long captured;
  /** Records held now (at most responseCap + partitions once N passes the cap). */
  private long kept;
  private long receivedChars;

  private static final class Part {
    long captured;
    long droppedRate;
    long droppedContention;
    boolean filterStopped;
    List<Object> records = new ArrayList<>();
  }

  RoundRecords(int responseCap) {
    this.responseCap = responseCap;
  }

  /**
   * Merges the report of {@code executorId} (its list of per-partition maps, see
   * {@link Messages}) and counts the executor as reported, in one step under this object's
   * lock: whoever sees it reported sees its records. A second report of the same executor
   * is ignored. Entries that are not well formed (a partition without a numeric index, a
   * record that is not a map) are skipped, never thrown: an executor's report must not
   * break the RPC handler. Returns whether the report was taken.
   */
  synchronized boolean add(String executorId, Object partitions) {
    if (reporters.contains(executorId)) {
      return false;
    }
    Set<Part> touched = new HashSet<>();
    if (partitions instanceof List) {
      for (Object o : (List<?>) partitions) {
        if (!(o instanceof Map) || !(((Map<?, ?>) o).get(Messages.PARTITION) instanceof Number)) {
          continue;
        }
        Map<?, ?> p = (Map<?, ?>) o;
        Part part = parts.computeIfAbsent(((Number) p.get(Messages.PARTITION)).intValue(),
            k -> new Part());
        touched.add(part);
        part.droppedRate += count(p.get(Messages.DROPPED_RATE));
        part.droppedContention += count(p.get(Messages.DROPPED_CONTENTION));
        part.filterStopped |= Boolean.TRUE.equals(p.get(Messages.FILTER_STOPPED));
        if (!(p.get(Messages.RECORDS) instanceof List)) {
          continue;
        }
        for (Object r : (List<?>) p.get(Messages.RECORDS)) {
          if (r instanceof Map) {
            receivedChars += String.valueOf(((Map<?, ?>) r).get(Messages.DATA)).length();
            part.records.add(r);
            part.captured++;
            captured++;
            kept++;
          }
        }
      }
    }
    // A partition reported twice (a retried task) merges by time: the earliest records are
    // the ones the cut keeps.
    for (Part part : touched) {
      part.records.sort(BY_TIMESTAMP);
    }
    reporters.add(executorId);
    trim();
    return true;
  }

  /** Whether {@code executorId}'s report was merged. */
  synchronized boolean hasReported(String executorId) {
    return reporters.contains(executorId);
  }

  /** The executors whose reports were merged, sorted. */
  synchronized Set<String> reported() {
    return new TreeSet<>(reporters);
  }

  private void trim() {
    if (captured <= responseCap) {
      return;
    }
    for (Part part : parts.values()) {
      long keep = part.captured * responseCap / captured + 1;
      if (part.records.size() > keep) {
        kept -= part.records.size() - keep;
        part.records = new ArrayList<>(part.records.subList(0, (int) keep));
      }
    }
  }

  /** The merged report: one map per partition, as an executor sends them, with its count. */
  synchronized List<Object> toReport() {
    List<Object> out = new ArrayList<>();
    for (Map.Entry<Integer, Part> e : parts.entrySet()) {
      Part part = e.getValue();
      Map<String, Object> p = new LinkedHashMap<>();
      p.put(Messages.PARTITION, e.getKey());
      p.put(Messages.RECORDS, new ArrayList<>(part.records));
      p.put(CAPTURED, part.captured);
      p.put(Messages.DROPPED_RATE, part.droppedRate);
      p.put(Messages.DROPPED_CONTENTION, part.droppedContention);
      p.put(Messages.FILTER_STOPPED, part.filterStopped);
      out.add(p);
    }
    return out;
  }

  /** What arrived and what is kept: {@code {"records", "chars", "kept"}}. */
  synchronized Map<String, Object> received() {
    Map<String, Object> out = new LinkedHashMap<>();
    out.put("records", captured);
    out.put("chars", receivedChars);
    out.put("kept", kept);
    return out;
  }

  private static long timestamp(Object record) {
    Object t = ((Map<?, ?>) record).get(Messages.TIMESTAMP);
    return t instanceof Number ? ((Number) t).longValue() : 0L;
  }

  private static long count(Object n) {
    return n instanceof Number ? ((Number) n).longValue() : 0L;
  }
}
