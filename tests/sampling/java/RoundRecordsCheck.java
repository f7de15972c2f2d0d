package io.sparkglass.sampling;

import java.util.ArrayList;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.concurrent.CountDownLatch;

/**
 * Run by test_round_records.py against the sampling jar: malformed executor reports are
 * skipped, never thrown, and an executor counts as reported only with its records merged,
 * whatever the readers see meanwhile. Prints "ok" or exits 1 with what failed.
 */
public final class RoundRecordsCheck {
  private RoundRecordsCheck() {}

  static void check(boolean ok, String what) {
    if (!ok) {
      System.out.println("FAILED: " + what);
      System.exit(1);
    }
  }

  static Map<String, Object> partition(Object index, int records, long t0) {
    List<Object> rs = new ArrayList<>();
    for (int i = 0; i < records; i++) {
      Map<String, Object> r = new HashMap<>();
      r.put(Messages.TIMESTAMP, t0 + i);
      r.put(Messages.DATA, "{\"i\":" + i + "}");
      rs.add(r);
    }
    Map<String, Object> p = new HashMap<>();
    p.put(Messages.PARTITION, index);
    p.put(Messages.RECORDS, rs);
    return p;
  }

  public static void main(String[] args) throws Exception {
    // Malformed entries are skipped; the well-formed rest of the report is merged.
    RoundRecords records = new RoundRecords(5000);
    List<Object> bad = new ArrayList<>();
    bad.add(partition("zero", 3, 0));            // index not a number
    bad.add(partition(null, 3, 0));              // no index
    bad.add("not a map");
    Map<String, Object> odd = partition(1, 2, 0);
    ((List<Object>) odd.get(Messages.RECORDS)).add("not a record");
    bad.add(odd);
    check(records.add("1", bad), "a malformed report was refused");
    check(records.hasReported("1"), "the executor is not counted as reported");
    check((Long) records.received().get("records") == 2L, "received " + records.received());
    check(!records.add("1", new ArrayList<>()), "a second report of one executor was taken");
    check(records.add("2", "not a list"), "a report that is not a list was refused");
    // SamplingDriver.receive never throws, whatever arrives.
    Map<String, Object> poll = new HashMap<>();
    poll.put(Messages.EXECUTOR_ID, "3");
    Map<String, Object> progress = new HashMap<>();
    List<Object> seen = new ArrayList<>();
    seen.add("x");
    progress.put("r", seen);
    poll.put(Messages.PROGRESS, progress);
    SamplingDriver.receive(poll);
    SamplingDriver.receive("not a map");

    // Readers racing eight reporters: whoever sees an executor reported sees its records.
    RoundRecords race = new RoundRecords(5000);
    int executors = 8;
    CountDownLatch start = new CountDownLatch(1);
    List<Thread> threads = new ArrayList<>();
    for (int e = 0; e < executors; e++) {
      final int id = e;
      Thread t = new Thread(() -> {
        List<Object> report = new ArrayList<>();
        for (int p = 0; p < 200; p++) {
          report.add(partition(id * 200 + p, 50, p));
        }
        try {
          start.await();
        } catch (InterruptedException ie) {
          return;
        }
        race.add(String.valueOf(id), report);
      });
      t.start();
      threads.add(t);
    }
    start.countDown();
    boolean done = false;
    while (!done) {
      int reported = race.reported().size();
      List<Object> merged = race.toReport();
      long captured = 0;
      for (Object o : merged) {
        captured += (Long) ((Map<?, ?>) o).get(RoundRecords.CAPTURED);
      }
      check(captured >= reported * 200L * 50L,
          reported + " executors reported but only " + captured + " records captured");
      done = reported == executors;
    }
    for (Thread t : threads) {
      t.join();
    }
    long kept = (Long) race.received().get("kept");
    check(kept <= 5000 + executors * 200, "kept " + kept);
    System.out.println("ok");
  }
}
