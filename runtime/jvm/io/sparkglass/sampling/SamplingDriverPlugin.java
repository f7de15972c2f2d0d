package io.sparkglass.sampling;

import java.util.Collections;
import java.util.Map;
import org.apache.spark.SparkContext;
import org.apache.spark.api.plugin.DriverPlugin;
import org.apache.spark.api.plugin.PluginContext;

/** Driver half of the plugin: answers executor polls and reports via {@link SamplingDriver}. */
public final class SamplingDriverPlugin implements DriverPlugin {
  @Override
  public Map<String, String> init(SparkContext sc, PluginContext ctx) {
    SamplingDriver.activate(sc.startTime());
    return Collections.emptyMap();
  }

  @Override
  public Object receive(Object message) {
    return SamplingDriver.receive(message);
  }

  @Override
  public void shutdown() {
    SamplingDriver.deactivate();
  }
}
