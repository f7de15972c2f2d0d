package io.sparkglass.quality;

/**
 * Run by test_expectation_counter.py against the sampling jar: the driver's tally keeps each
 * micro-batch apart and hands it out once; a partition reported again replaces its count; of
 * two places counting one micro-batch the fuller one is given; the tally stays bounded (oldest
 * dropped and counted); it keeps no empty task and refuses a tally of another size. Prints
 * "ok" or exits 1 with what failed.
 */
public final class ExpectationTallyCheck {
  private ExpectationTallyCheck() {}

  static void check(boolean ok, String what) {
    if (!ok) {
      System.out.println("FAILED: " + what);
      System.exit(1);
    }
  }

  /** A finished task's copy: occurrence 0 of partition {@code part} of batch {@code batch}. */
  static ExpectationTally task(ExpectationTally driver, String query, long batch, int part,
      long rows, long failed) {
    return task(driver, query, batch, part, 0, rows, failed);
  }

  static ExpectationTally task(ExpectationTally driver, String query, long batch, int part,
      int occurrence, long rows, long failed) {
    ExpectationTally t =
        driver.copy().countingFor(ExpectationTally.batchKey(query, "" + batch), part);
    long[] counts = t.countsFor(occurrence);
    counts[0] += rows;
    counts[1] += failed;
    return t;
  }

  public static void main(String[] args) {
    ExpectationTally driver = new ExpectationTally(2);
    check(driver.isZero() && driver.copy().isZero(), "a new tally and its copy are zero");
    driver.merge(task(driver, "q", 0, 0, 10, 3));
    driver.merge(task(driver, "q", 0, 1, 5, 1));
    driver.merge(task(driver, "q", 1, 0, 7, 7));
    driver.merge(task(driver, "other", 0, 0, 2, 0));
    driver.merge(task(driver, "q", 2, 0, 0, 0));
    check(!driver.isZero(), "a tally holding counts is not zero");
    check(driver.take("q", "0").equals("0;15,4,0"), "two partitions of batch 0 add up");
    check(driver.take("q", "0").equals("0;"), "a batch is handed out once");
    check(driver.take("q", "1").equals("0;7,7,0"), "batch 1 is its own");
    check(driver.take("other", "0").equals("0;2,0,0"), "another query's batch 0 is its own");
    check(driver.take("q", "2").equals("0;"), "a task that saw no row is not kept");
    check(driver.copy().isZero(), "the copy Spark ships to tasks carries no driver counts");

    // A partition reported twice (speculation, a stage run again): the latest count replaces.
    driver.merge(task(driver, "q", 3, 0, 10, 2));
    driver.merge(task(driver, "q", 3, 1, 10, 1));
    driver.merge(task(driver, "q", 3, 0, 10, 2));
    driver.merge(task(driver, "q", 3, 1, 2, 0)); // a job that stopped early (a show())
    check(driver.take("q", "3").equals("0;20,3,0"), "a partition again keeps its fullest count");
    driver.merge(task(driver, "q", 6, 0, 2, 0));
    driver.merge(task(driver, "q", 6, 0, 10, 4)); // the full job after the partial one
    check(driver.take("q", "6").equals("0;10,4,0"), "a fuller report replaces a partial one");

    // Two places counting one batch (two paths, two jobs): each saw every row, one is given.
    driver.merge(task(driver, "q", 4, 0, 0, 10, 2));
    driver.merge(task(driver, "q", 4, 1, 0, 10, 2));
    driver.merge(task(driver, "q", 4, 0, 1, 10, 2));
    driver.merge(task(driver, "q", 4, 1, 1, 10, 2));
    driver.merge(task(driver, "q", 4, 0, 2, 3, 1)); // a partial job (a limit) counted less
    check(driver.take("q", "4").equals("0;20,4,0"), "two occurrences count once");

    // Occurrences in one task copy (two places in one stage) stay apart too.
    ExpectationTally both = task(driver, "q", 5, 0, 0, 4, 1);
    both.countsFor(1)[0] += 4;
    driver.merge(both);
    check(driver.take("q", "5").equals("0;4,1,0"), "occurrences of one task stay apart");

    // Bounded: many batches of many partitions; the oldest go first, counted.
    int parts = 1000;
    int batches = ExpectationTally.MAX_ENTRIES / parts + 5;
    for (int b = 0; b < batches; b++) {
      for (int p = 0; p < parts; p++) {
        driver.merge(task(driver, "big", b, p, 1, 0));
      }
    }
    long dropped = driver.droppedBatches();
    check(dropped >= 5 && dropped <= 6, "the oldest batches dropped and counted: " + dropped);
    check(driver.take("big", "0").equals(dropped + ";"), "the oldest is gone");
    check(driver.take("big", "" + (batches - 1)).equals(dropped + ";1000,0,0"), "newest kept");
    // One batch alone past half the bound keeps its sums (no per-partition entries).
    for (int p = 0; p < ExpectationTally.MAX_ENTRIES; p++) {
      driver.merge(task(driver, "huge", 0, p, 1, 1));
    }
    check(driver.take("huge", "0").endsWith(";" + ExpectationTally.MAX_ENTRIES + ","
        + ExpectationTally.MAX_ENTRIES + ",0"), "a huge batch keeps its sums");

    try {
      ExpectationTally small = new ExpectationTally(1).countingFor("q/0", 0);
      small.countsFor(0)[0] = 1;
      driver.merge(small);
      check(false, "a tally of another size is refused");
    } catch (IllegalArgumentException expected) {
      check(expected.getMessage().contains("1 expectations"), expected.getMessage());
    }
    try {
      driver.add(new long[] {1});
      check(false, "counts of the wrong length are refused");
    } catch (IllegalArgumentException expected) {
      check(expected.getMessage().contains("3 entries"), expected.getMessage());
    }
    try {
      new ExpectationTally(0);
      check(false, "a tally of no expectation is refused");
    } catch (IllegalArgumentException expected) {
      check(expected.getMessage().contains("1 or more"), expected.getMessage());
    }
    System.out.println("ok");
  }
}
