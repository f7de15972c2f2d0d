package io.sparkglass.sampling;

import java.io.IOException;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.LinkOption;
import java.nio.file.Path;
import java.nio.file.Paths;
import java.security.GeneralSecurityException;
import java.util.Arrays;
import java.util.Collections;
import javax.crypto.Mac;
import javax.crypto.spec.SecretKeySpec;
import org.apache.spark.SparkEnv;
import org.apache.spark.sql.SparkSession;
import org.apache.spark.sql.catalyst.InternalRow;
import org.apache.spark.sql.catalyst.analysis.FunctionRegistry;
import org.apache.spark.sql.catalyst.analysis.TypeCheckResult;
import org.apache.spark.sql.catalyst.expressions.Expression;
import org.apache.spark.sql.catalyst.expressions.codegen.CodeBlock;
import org.apache.spark.sql.catalyst.expressions.codegen.CodegenContext;
import org.apache.spark.sql.catalyst.expressions.codegen.ExprCode;
import org.apache.spark.sql.catalyst.expressions.codegen.JavaCode;
import org.apache.spark.sql.internal.SQLConf;
import org.apache.spark.sql.types.DataType;
import org.apache.spark.sql.types.DataTypes;
import org.apache.spark.sql.types.StringType;
import org.apache.spark.unsafe.types.UTF8String;
import scala.collection.immutable.IndexedSeq;
import scala.collection.immutable.Seq;
import scala.jdk.javaapi.CollectionConverters;

/**
 * {@code sg_redact_hash(string)}: the {@code hash} redaction, HMAC-SHA-256 of the value's
 * UTF-8 bytes under the application's secret key, as 64 lowercase hex digits (null stays
 * null). An unkeyed digest of a small domain (airport codes, phone numbers, ids) is undone
 * with a lookup table; a keyed one links equal values within the application and nothing
 * more.
 *
 * <p>The key is never part of the expression: a plan, {@code explain}, the Spark UI and a
 * serialized task hold only {@code sg_redact_hash(<child>)}. Each instance (one per task
 * after deserialization) looks the key up once, where it runs, in this order:
 *
 * <ol>
 *   <li>{@link #KEY_CONF} in the SQL conf of the running task (the session's conf, which
 *       Spark hands to every task of a query) or of the active session on the driver;
 *   <li>{@link #KEY_CONF} in the process's {@code SparkConf} (on executors: what the driver
 *       was started with, fetched at registration);
 *   <li>a key installed in this JVM ({@link #installKeyFile}: local mode, where the
 *       executors are this JVM);
 *   <li>the environment variable {@link #KEY_ENV} of this process.
 * </ol>
 *
 * <p>The conf's name contains {@code secret}, so Spark's default {@code spark.redaction.regex}
 * hides its value in the UI, the event log and {@code SET}. A key is hex text of at least 32
 * bytes. With no usable key a value is rendered as null and the tap's error counter
 * ({@link TapErrors}) says why: the tap never fails the application's task, and no unkeyed
 * digest is ever produced.
 *
 * <p>Written against Catalyst's classes as {@code io.sparkglass.extensions.NativeTapGate} is
 * (why it extends {@code Expression}: see there; the case-class members: {@link
 * CaseClassExpression}).
 */
public final class RedactionHash extends CaseClassExpression {
  private static final long serialVersionUID = 1L;
  /** The SQL function name. */
  public static final String NAME = "sg_redact_hash";
  /** The Spark conf holding the key (hex). */
  public static final String KEY_CONF = "spark.sparkglass.sampling.redact.secret";
  /** The environment variable holding the key (hex) when the conf does not. */
  public static final String KEY_ENV = "SPARKGLASS_REDACTION_KEY";
  /** Shortest key, in bytes. */
  public static final int MIN_KEY_BYTES = 32;

  private static final String ALGORITHM = "HmacSHA256";
  private static final char[] HEX = "0123456789abcdef".toCharArray();
  private static volatile byte[] installed;

  private final Expression child;
  private transient Mac mac;
  private transient boolean resolved;

  public RedactionHash(Expression child) {
    if (child == null) {
      throw new IllegalArgumentException(NAME + ": no argument");
    }
    this.child = child;
  }

  public Expression child() {
    return child;
  }

  // ------------------------------------------------------------------ the key

  /**
   * Where the key for {@code spark} comes from, without revealing it: {@code conf},
   * {@code sparkConf}, {@code installed}, {@code env}, {@code missing}; or {@code invalid:}
   * followed by the source whose text is not a key ({@code invalid:conf} when the conf holds
   * an unexpanded {@code $(...)} reference is {@code unexpanded:conf}).
   */
  public static String keySource(SparkSession spark) {
    String session = null;
    try {
      session = spark.conf().get(KEY_CONF, null);
    } catch (Throwable e) {
      session = null;
    }
    if (!blank(session)) {
      return judged("conf", session);
    }
    String conf = sparkConfKey();
    if (!blank(conf)) {
      return judged("sparkConf", conf);
    }
    if (installed != null) {
      return "installed";
    }
    String env = System.getenv(KEY_ENV);
    if (!blank(env)) {
      return judged("env", env);
    }
    return "missing";
  }

  private static String judged(String source, String text) {
    if (parseKey(text) != null) {
      return source;
    }
    return text.trim().startsWith("$(") ? "unexpanded:" + source : "invalid:" + source;
  }

  /**
   * Reads the key in {@code path} (hex text, at least {@link #MIN_KEY_BYTES} bytes) and makes
   * it this JVM's installed key. Throws {@link IllegalArgumentException} naming the file,
   * never its content, for a link, an unreadable file or text that is not a key.
   */
  public static void installKeyFile(String path) {
    Path file = Paths.get(path);
    if (Files.isSymbolicLink(file) || !Files.isRegularFile(file, LinkOption.NOFOLLOW_LINKS)) {
      throw new IllegalArgumentException("redaction key file " + path
          + " is not a regular file");
    }
    String text;
    try {
      text = new String(Files.readAllBytes(file), StandardCharsets.US_ASCII);
    } catch (IOException e) {
      throw new IllegalArgumentException("redaction key file " + path + " cannot be read ("
          + e.getClass().getSimpleName() + ")");
    }
    byte[] key = parseKey(text);
    if (key == null) {
      throw new IllegalArgumentException("redaction key file " + path + " does not hold a key"
          + " (hex text of at least " + MIN_KEY_BYTES + " bytes)");
    }
    installed = key;
  }

  /** Forgets the installed key (tests). */
  public static void uninstallKey() {
    installed = null;
  }

  private static String sparkConfKey() {
    try {
      SparkEnv env = SparkEnv.get();
      return env == null ? null : env.conf().get(KEY_CONF, null);
    } catch (Throwable e) {
      return null;
    }
  }

  /** The key where this runs (see the class comment), or null when there is none. */
  static byte[] currentKey() {
    String text = null;
    try {
      text = SQLConf.get().getConfString(KEY_CONF, null);
    } catch (Throwable e) {
      text = null;
    }
    if (blank(text)) {
      text = sparkConfKey();
    }
    if (blank(text)) {
      byte[] key = installed;
      if (key != null) {
        return key.clone();
      }
      text = System.getenv(KEY_ENV);
    }
    return blank(text) ? null : parseKey(text);
  }

  /** The bytes of hex {@code text} when it is a key (even length, at least 32 bytes). */
  static byte[] parseKey(String text) {
    if (text == null) {
      return null;
    }
    String hex = text.trim();
    if (hex.length() < 2 * MIN_KEY_BYTES || hex.length() % 2 != 0) {
      return null;
    }
    byte[] out = new byte[hex.length() / 2];
    for (int i = 0; i < out.length; i++) {
      int hi = Character.digit(hex.charAt(2 * i), 16);
      int lo = Character.digit(hex.charAt(2 * i + 1), 16);
      if (hi < 0 || lo < 0) {
        return null;
      }
      out[i] = (byte) ((hi << 4) | lo);
    }
    return out;
  }

  private static boolean blank(String s) {
    return s == null || s.trim().isEmpty();
  }

  // ------------------------------------------------------------ registration

  /**
   * Makes {@code sg_redact_hash} resolvable in {@code spark} (a temporary function) unless it
   * already is (the session extension injects it). Only the function: no key is read here.
   */
  public static void register(SparkSession spark) {
    if (spark.catalog().functionExists(NAME)) {
      return;
    }
    org.apache.spark.sql.classic.SparkSession classic =
        (org.apache.spark.sql.classic.SparkSession) spark;
    FunctionRegistry registry = classic.sessionState().functionRegistry();
    registry.createOrReplaceTempFunction(NAME, RedactionHash::build, "java_udf");
  }

  /** The function builder: one string argument. */
  public static Expression build(Seq<Expression> args) {
    if (args.size() != 1) {
      throw new IllegalArgumentException(NAME + "(string) takes one argument");
    }
    return new RedactionHash(args.head());
  }

  // --------------------------------------------------------------- evaluation

  private Mac mac() {
    if (!resolved) {
      resolved = true;
      byte[] key = currentKey();
      if (key == null) {
        TapErrors.record(new IllegalStateException("sparkglass: no redaction key in this JVM ("
            + KEY_CONF + " or $" + KEY_ENV + ", hex of at least " + MIN_KEY_BYTES
            + " bytes): hashed columns are rendered as null"));
      } else {
        try {
          Mac m = Mac.getInstance(ALGORITHM);
          m.init(new SecretKeySpec(key, ALGORITHM));
          mac = m;
        } catch (GeneralSecurityException e) {
          TapErrors.record(new IllegalStateException("sparkglass: " + ALGORITHM
              + " is not available (" + e.getClass().getSimpleName() + ")"));
        } finally {
          Arrays.fill(key, (byte) 0);
        }
      }
    }
    return mac;
  }

  /** The keyed hash of {@code value} as 64 lowercase hex digits; null without a key. */
  public UTF8String hash(UTF8String value) {
    Mac m = mac();
    if (m == null || value == null) {
      return null;
    }
    byte[] digest = m.doFinal(value.getBytes());
    char[] out = new char[digest.length * 2];
    for (int i = 0; i < digest.length; i++) {
      out[2 * i] = HEX[(digest[i] >> 4) & 0xf];
      out[2 * i + 1] = HEX[digest[i] & 0xf];
    }
    return UTF8String.fromString(new String(out));
  }

  @Override
  public Object eval(InternalRow input) {
    Object value = child.eval(input);
    return value == null ? null : hash((UTF8String) value);
  }

  @Override
  public ExprCode doGenCode(CodegenContext ctx, ExprCode ev) {
    ExprCode in = child.genCode(ctx);
    String self = ctx.addReferenceObj("sgRedactHash", this, RedactionHash.class.getName());
    String isNull = ev.isNull().toString();
    String value = ev.value().toString();
    String utf8 = UTF8String.class.getName();
    String code = in.code().toString() + "\n"
        + "boolean " + isNull + " = " + in.isNull() + ";\n"
        + utf8 + " " + value + " = null;\n"
        + "if (!" + isNull + ") {\n"
        + "  " + value + " = " + self + ".hash(" + in.value() + ");\n"
        + "  " + isNull + " = " + value + " == null;\n"
        + "}";
    return ev.copy(
        new CodeBlock(seq(Collections.singletonList(code)),
            seq(Collections.<JavaCode>emptyList())),
        ev.isNull(), ev.value());
  }

  @Override
  public TypeCheckResult checkInputDataTypes() {
    if (child.dataType() instanceof StringType) {
      return TypeCheckResult.TypeCheckSuccess$.MODULE$;
    }
    return new TypeCheckResult.TypeCheckFailure(
        NAME + " takes a string (CAST the value AS STRING), not " + child.dataType().sql());
  }

  @Override
  public boolean nullable() {
    return true;
  }

  @Override
  public DataType dataType() {
    return DataTypes.StringType;
  }

  @Override
  public boolean foldable() {
    return false; // evaluated where the rows are, never on the driver by constant folding
  }

  @Override
  public String prettyName() {
    return NAME;
  }

  @Override
  public String sql() {
    return NAME + "(" + child.sql() + ")";
  }

  @Override
  public String toString() {
    return NAME + "(" + child + ")";
  }

  // The case-class members.

  private static <T> Seq<T> seq(java.util.List<T> items) {
    return CollectionConverters.asScala(items).toSeq();
  }

  @Override
  protected Object[] caseFields() {
    return new Object[] {child};
  }

  @Override
  public Seq<Expression> children() {
    return seq(Collections.singletonList(child));
  }

  @Override
  public Expression withNewChildrenInternal(IndexedSeq<Expression> newChildren) {
    return new RedactionHash(newChildren.apply(0));
  }
}
