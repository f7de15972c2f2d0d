package io.sparkglass.sampling;

import org.apache.spark.api.plugin.DriverPlugin;
import org.apache.spark.api.plugin.ExecutorPlugin;
import org.apache.spark.api.plugin.SparkPlugin;

/**
 * The sparkglass sampling plugin, named in {@code spark.plugins}.
 *
 * <p>The driver half ({@link SamplingDriverPlugin}) holds the rounds; the executor half
 * ({@link SamplingExecutorPlugin}) polls the driver for them, because Spark's plugin RPC
 * only goes from executor to driver.
 */
public final class SamplingPlugin implements SparkPlugin {
  @Override
  public DriverPlugin driverPlugin() {
    return new SamplingDriverPlugin();
  }

  @Override
  public ExecutorPlugin executorPlugin() {
    return new SamplingExecutorPlugin();
  }
}
