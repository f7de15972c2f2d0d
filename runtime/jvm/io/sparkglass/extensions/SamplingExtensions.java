package io.sparkglass.extensions;

import io.sparkglass.sampling.RedactionHash;
import org.apache.spark.sql.SparkSessionExtensions;
import org.apache.spark.sql.SparkSessionExtensionsProvider;
import org.apache.spark.sql.catalyst.FunctionIdentifier;
import org.apache.spark.sql.catalyst.expressions.ExpressionInfo;
import scala.Tuple3;
import scala.runtime.BoxedUnit;

/**
 * The sampling tap as a session extension, named in {@code spark.sql.extensions}: pipelines
 * that do not use the sparkglass DSL (plain Structured Streaming, Spark Declarative Pipelines)
 * get taps from configuration alone.
 *
 * <p>It injects
 *
 * <ul>
 *   <li>{@code sg_tap_gate('key')} and {@code sg_tap_capture('key', struct)}: the gate and
 *       capture of tap {@code key} as built-in functions (no register-by-name, which SDP
 *       forbids while it imports definitions);
 *   <li>{@code sg_redact_hash(str)}: the {@code hash} redaction ({@link RedactionHash});
 *   <li>{@link StreamTapRule}: a post-hoc resolution rule that puts a tap at the output of each
 *       named streaming query and of each temporary view it reads.
 * </ul>
 *
 * <p>With {@code spark.sparkglass.sampling.enabled} false (the default) the rule changes no
 * plan. Not registered through {@code META-INF/services} on purpose: a DSL job with the jar on
 * its classpath must not get a second set of taps.
 */
public final class SamplingExtensions implements SparkSessionExtensionsProvider {
  /** The class name to put in {@code spark.sql.extensions}. */
  public static final String CLASS_NAME = SamplingExtensions.class.getName();

  @Override
  public BoxedUnit apply(SparkSessionExtensions extensions) {
    extensions.injectFunction(new Tuple3<>(
        FunctionIdentifier.apply(TapFunctions.GATE),
        new ExpressionInfo(TapFunctions.class.getName(), null, TapFunctions.GATE,
            "_FUNC_(key) - true when tap `key` admits the current row (sparkglass sampling)",
            ""),
        TapFunctions::gateBuilder));
    extensions.injectFunction(new Tuple3<>(
        FunctionIdentifier.apply(TapFunctions.CAPTURE),
        new ExpressionInfo(TapFunctions.class.getName(), null, TapFunctions.CAPTURE,
            "_FUNC_(key, row) - keeps `row` for tap `key`'s round; always true", ""),
        TapFunctions::captureBuilder));
    extensions.injectFunction(new Tuple3<>(
        FunctionIdentifier.apply(NativeTapGate.NAME),
        new ExpressionInfo(NativeTapGate.class.getName(), null, NativeTapGate.NAME,
            "_FUNC_(key) - tap `key`'s gate, code-generated: an idle tap is one field read",
            ""),
        TapFunctions::nativeGateBuilder));
    // The keyed hash of the `hash` redaction: a round's program renders hashed columns with it.
    extensions.injectFunction(new Tuple3<>(
        FunctionIdentifier.apply(RedactionHash.NAME),
        new ExpressionInfo(RedactionHash.class.getName(), null, RedactionHash.NAME,
            "_FUNC_(str) - HMAC-SHA-256 of `str` under the application's redaction key, 64 hex"
                + " digits (sparkglass redaction)",
            ""),
        RedactionHash::build));
    extensions.injectPostHocResolutionRule(StreamTapRule::new);
    return BoxedUnit.UNIT;
  }
}
