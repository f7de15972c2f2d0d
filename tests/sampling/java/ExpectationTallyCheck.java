package io.sparkglass.quality;

/**
 * Run by test_expectation_counter.py against the sampling jar: the driver's tally keeps each
 * micro-batch apart, hands it out once, stays bounded (oldest dropped and counted), keeps no
 * empty task and refuses a tally of another size. Prints "ok" or exits 1 with what failed.
 */
public final class ExpectationTallyCheck {
  private ExpectationTallyCheck() {}

  static void check(boolean ok, String what) {
    if (!ok) {
      System.out.println("FAILED: " + what);
      System.exit(1);
    }
  }

  static ExpectationTally task(ExpectationTally driver, String query, long batch, long rows,
      long failed) {
    ExpectationTally t = driver.copy().countingFor(ExpectationTally.batchKey(query, "" + batch));
    t.add(new long[] {rows, failed, 0});
    return t;
  }

  public static void main(String[] args) {
    ExpectationTally driver = new ExpectationTally(2);
    check(driver.isZero() && driver.copy().isZero(), "a new tally and its copy are zero");
    driver.merge(task(driver, "q", 0, 10, 3));
    driver.merge(task(driver, "q", 0, 5, 1));
    driver.merge(task(driver, "q", 1, 7, 7));
    driver.merge(task(driver, "other", 0, 2, 0));
    driver.merge(task(driver, "q", 2, 0, 0));
    check(!driver.isZero(), "a tally holding counts is not zero");
    long[] b0 = driver.take("q", "0");
    check(b0 != null && b0[0] == 15 && b0[1] == 4 && b0[2] == 0, "two tasks of batch 0 add up");
    check(driver.take("q", "0") == null, "a batch is handed out once");
    check(driver.take("q", "1")[1] == 7, "batch 1 is its own");
    check(driver.take("other", "0")[0] == 2, "another query's batch 0 is its own");
    check(driver.take("q", "2") == null, "a task that saw no row is not kept");
    check(driver.copy().isZero(), "the copy Spark ships to tasks carries no driver counts");

    for (int b = 0; b < ExpectationTally.MAX_BATCHES + 10; b++) {
      driver.merge(task(driver, "q", b, 1, 0));
    }
    check(driver.value().size() == ExpectationTally.MAX_BATCHES, "at most MAX_BATCHES kept");
    check(driver.droppedBatches() == 10, "the 10 oldest dropped and counted");
    check(driver.take("q", "0") == null && driver.take("q", "10") != null, "oldest first");

    try {
      ExpectationTally small = new ExpectationTally(1).countingFor("q/0");
      small.add(new long[] {1, 1});
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
