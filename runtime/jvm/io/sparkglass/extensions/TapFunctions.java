package io.sparkglass.extensions;

import io.sparkglass.sampling.CaptureUdf;
import io.sparkglass.sampling.GateUdf;
import java.util.ArrayList;
import java.util.Collections;
import java.util.List;
import org.apache.spark.sql.catalyst.expressions.CreateStruct$;
import org.apache.spark.sql.catalyst.expressions.Expression;
import org.apache.spark.sql.catalyst.expressions.If;
import org.apache.spark.sql.catalyst.expressions.Literal$;
import org.apache.spark.sql.catalyst.expressions.ScalaUDF;
import org.apache.spark.sql.classic.UserDefinedFunctionUtils;
import org.apache.spark.sql.expressions.SparkUserDefinedFunction;
import org.apache.spark.sql.functions;
import org.apache.spark.sql.internal.SQLConf;
import org.apache.spark.sql.types.DataTypes;
import org.apache.spark.sql.types.StringType;
import scala.collection.immutable.Seq;
import scala.jdk.javaapi.CollectionConverters;

/**
 * Builds the tap's Catalyst expressions: the same {@link GateUdf} and {@link CaptureUdf} the
 * DSL registers by name, as resolved {@link ScalaUDF}s (nondeterministic, so the optimizer
 * never folds, reorders or deduplicates them), without touching the function registry.
 */
public final class TapFunctions {
  static final String GATE = "sg_tap_gate";
  static final String CAPTURE = "sg_tap_capture";
  /**
   * Conf: taps use {@link NativeTapGate} (default true); {@code false} is the escape hatch back
   * to the {@link GateUdf}.
   */
  public static final String NATIVE_GATE_CONF = "spark.sparkglass.sampling.nativeGate";

  private TapFunctions() {}

  static <T> Seq<T> seq(List<T> items) {
    return CollectionConverters.asScala(items).toSeq();
  }

  /** {@code sg_tap_gate(key)}: the gate of tap {@code key}. */
  public static ScalaUDF gate(String tapKey) {
    SparkUserDefinedFunction udf = (SparkUserDefinedFunction) functions
        .udf(new GateUdf(tapKey), DataTypes.BooleanType).asNondeterministic().withName(GATE);
    return UserDefinedFunctionUtils.toScalaUDF(udf, seq(Collections.emptyList()));
  }

  /** {@code sg_tap_capture(key, row)}: the capture of tap {@code key}, fed {@code row}. */
  public static ScalaUDF capture(String tapKey, Expression row) {
    return capture(tapKey, CAPTURE, row);
  }

  /** The capture of tap {@code key}, fed {@code row}, shown in plans as {@code name(row)}. */
  static ScalaUDF capture(String tapKey, String name, Expression row) {
    SparkUserDefinedFunction udf = (SparkUserDefinedFunction) functions
        .udf(new CaptureUdf(tapKey), DataTypes.BooleanType).asNondeterministic()
        .withName(name);
    return UserDefinedFunctionUtils.toScalaUDF(udf, seq(Collections.singletonList(row)));
  }

  /**
   * The tap condition over {@code columns} (always true): {@code IF(gate, capture(struct(
   * columns)), true)}. The struct is built only behind the gate, so an idle tap costs the
   * gate's volatile read and nothing else. With the native gate the capture is a
   * {@link TapCapture}, whose code stays out of the stage's generated method (many taps in one
   * stage would otherwise push it past the JIT's size limit); the UDF gate, the escape hatch,
   * keeps the plain {@code ScalaUDF} capture.
   */
  public static Expression condition(String tapKey, List<? extends Expression> columns) {
    Expression row = CreateStruct$.MODULE$.apply(seq(new ArrayList<Expression>(columns)));
    Expression gate = null;
    Expression capture = capture(tapKey, row);
    if (nativeGateEnabled()) {
      try {
        gate = new NativeTapGate(tapKey);
        capture = new TapCapture(capture);
      } catch (Throwable e) { // never fail the query for sampling: the UDF gate instead
        NativeGateFallbacks.record(e);
      }
    }
    if (gate == null) {
      gate = gate(tapKey);
    }
    return new If(gate, capture, Literal$.MODULE$.TrueLiteral());
  }

  /**
   * Whether taps placed by {@link StreamTapRule} use the code-generated gate
   * ({@link NativeTapGate}) instead of the {@code GateUdf}: true unless
   * {@link #NATIVE_GATE_CONF} is {@code false} in the active session's conf (the same rule as
   * the DSL's {@code native_gate_enabled}).
   */
  static boolean nativeGateEnabled() {
    try {
      return !"false".equalsIgnoreCase(
          SQLConf.get().getConfString(NATIVE_GATE_CONF, "true").trim());
    } catch (Throwable e) {
      return true;
    }
  }

  /** {@code sg_tap_gate_native(key)}: the code-generated gate of tap {@code key}. */
  static Expression nativeGateBuilder(Seq<Expression> args) {
    if (args.size() != 1) {
      throw new IllegalArgumentException(NativeTapGate.NAME + "(key) takes one argument");
    }
    return new NativeTapGate(key(args, NativeTapGate.NAME));
  }

  /**
   * True when {@code e} is (or contains) a tap gate, ours or one the DSL registered: a
   * {@link NativeTapGate}, or a {@link ScalaUDF} named {@code sg_tap_gate} or {@code sg_gate_N}
   * (Spark wraps the {@link GateUdf} in a lambda, so the UDF gate is known by its name).
   */
  public static boolean containsGate(Expression e) {
    if (e instanceof ScalaUDF && isUdfGateName(((ScalaUDF) e).udfName())) {
      return true;
    }
    if (e instanceof NativeTapGate) {
      return true;
    }
    for (Expression child : CollectionConverters.asJava(e.children())) {
      if (containsGate(child)) {
        return true;
      }
    }
    return false;
  }

  private static boolean isUdfGateName(scala.Option<String> name) {
    if (name == null || name.isEmpty()) {
      return false;
    }
    String n = name.get();
    return GATE.equals(n) || n.matches("sg_gate_[0-9]+");
  }

  private static String key(Seq<Expression> args, String name) {
    Expression first = args.isEmpty() ? null : args.head();
    if (first == null || !first.foldable() || !(first.dataType() instanceof StringType)) {
      throw new IllegalArgumentException(name + " takes a constant string tap key first");
    }
    Object value = first.eval(null);
    if (value == null) {
      throw new IllegalArgumentException(name + ": the tap key is null");
    }
    return value.toString();
  }

  static Expression gateBuilder(Seq<Expression> args) {
    if (args.size() != 1) {
      throw new IllegalArgumentException(GATE + "(key) takes one argument");
    }
    return gate(key(args, GATE));
  }

  static Expression captureBuilder(Seq<Expression> args) {
    if (args.size() != 2) {
      throw new IllegalArgumentException(CAPTURE + "(key, row) takes two arguments");
    }
    return capture(key(args, CAPTURE), args.apply(1));
  }
}
