package io.sparkglass.extensions;

import io.sparkglass.sampling.TapErrors;
import java.util.ArrayList;
import java.util.Collections;
import java.util.LinkedHashSet;
import java.util.List;
import java.util.Set;
import org.apache.spark.sql.SparkSession;
import org.apache.spark.sql.catalyst.catalog.CatalogTable;
import org.apache.spark.sql.catalyst.expressions.Attribute;
import org.apache.spark.sql.catalyst.plans.logical.Filter;
import org.apache.spark.sql.catalyst.plans.logical.LeafNode;
import org.apache.spark.sql.catalyst.plans.logical.LogicalPlan;
import org.apache.spark.sql.catalyst.plans.logical.SubqueryAlias;
import org.apache.spark.sql.catalyst.plans.logical.View;
import org.apache.spark.sql.catalyst.rules.Rule;
import org.apache.spark.sql.catalyst.analysis.ResolvedIdentifier;
import org.apache.spark.sql.catalyst.plans.logical.V2CreateTableAsSelectPlan;
import org.apache.spark.sql.catalyst.plans.logical.V2WriteCommand;
import org.apache.spark.sql.catalyst.streaming.WriteToStream;
import org.apache.spark.sql.execution.command.CreateDataSourceTableAsSelectCommand;
import org.apache.spark.sql.execution.datasources.InsertIntoHadoopFsRelationCommand;
import org.apache.spark.sql.internal.SQLConf;
import scala.jdk.javaapi.CollectionConverters;

/**
 * Puts a tap at the output of each named streaming query (vertex = {@code queryName}; Spark
 * Declarative Pipelines name a streaming flow's query by the flow's identifier) and at the
 * output of each temporary view the query reads (vertex = the view's name).
 *
 * <p>A post-hoc resolution rule: it runs once per analysis, after resolution, on the plan
 * {@code DataStreamWriter.start()} analyzes, whose root is {@link WriteToStream}. Every
 * micro-batch reuses that analyzed plan, so the tap is placed once per query start and costs
 * nothing per batch. Each tap is recorded in {@link DiscoveredTaps} for the driver's round
 * coordinator.
 *
 * <p>The rule never fails a query: any error leaves the plan as it was (counted in
 * {@link DiscoveredTaps#ruleErrors()}). A plan that already holds a gate (a DSL vertex) is
 * left alone, so a tap is never doubled.
 */
public final class StreamTapRule extends Rule<LogicalPlan> {
  /** The master switch, as the Python side reads it. */
  public static final String ENABLED_CONF = "spark.sparkglass.sampling.enabled";
  /** Tap key prefixes: the coordinator starts rounds by key. */
  public static final String QUERY_PREFIX = "query/";
  public static final String VIEW_PREFIX = "view/";

  private final SparkSession session;

  public StreamTapRule(SparkSession session) {
    this.session = session;
  }

  private boolean enabled() {
    try {
      return "true".equalsIgnoreCase(session.conf().get(ENABLED_CONF, "false").trim());
    } catch (Throwable e) {
      return false;
    }
  }

  @Override
  public LogicalPlan apply(LogicalPlan plan) {
    if (!enabled()) {
      return plan;
    }
    if (!(plan instanceof WriteToStream)) {
      recordBatchWrite(plan);
      return plan;
    }
    WriteToStream write = (WriteToStream) plan;
    String name = write.name();
    if (name == null || name.isEmpty()) {
      return plan; // an unnamed query has no stable name to be a vertex by
    }
    try {
      LogicalPlan input = write.inputQuery();
      if (holdsTap(input)) {
        return plan;
      }
      Set<String> inputs = new LinkedHashSet<>();
      LogicalPlan tapped = tapViews(input, inputs);
      String key = QUERY_PREFIX + name;
      QueryTracker.listenTo(session);
      Filter filter = new Filter(TapFunctions.condition(key, output(tapped)), tapped);
      DiscoveredTaps.put(key, DiscoveredTaps.KIND_QUERY, name, tapped.schema().json(),
          new ArrayList<>(inputs), sinkName(write), corruptColumns(tapped));
      return write.withNewChildren(TapFunctions.seq(Collections.singletonList(filter)));
    } catch (Throwable e) {
      DiscoveredTaps.ruleFailed(name, e);
      return plan;
    }
  }

  /**
   * A batch write into a catalog table (a materialized view's refresh, an INSERT): its table
   * and the relations it reads, so the graph has the edge. Nothing is tapped: such a table is
   * sampled from what was written (end-of-input).
   */
  private static void recordBatchWrite(LogicalPlan plan) {
    try {
      String table = null;
      LogicalPlan query = null;
      if (plan instanceof V2WriteCommand) {
        table = ((V2WriteCommand) plan).table().name();
        query = ((V2WriteCommand) plan).query();
      } else if (plan instanceof InsertIntoHadoopFsRelationCommand) {
        InsertIntoHadoopFsRelationCommand insert = (InsertIntoHadoopFsRelationCommand) plan;
        if (insert.catalogTable().isDefined()) {
          table = insert.catalogTable().get().identifier().unquotedString();
        }
        query = insert.query();
      } else if (plan instanceof CreateDataSourceTableAsSelectCommand) {
        CreateDataSourceTableAsSelectCommand ctas = (CreateDataSourceTableAsSelectCommand) plan;
        table = ctas.table().identifier().unquotedString();
        query = ctas.query();
      } else if (plan instanceof V2CreateTableAsSelectPlan) {
        V2CreateTableAsSelectPlan ctas = (V2CreateTableAsSelectPlan) plan;
        if (ctas.name() instanceof ResolvedIdentifier) {
          ResolvedIdentifier id = (ResolvedIdentifier) ctas.name();
          table = id.catalog().name() + "." + id.identifier().toString();
        }
        query = ctas.query();
      }
      if (table == null || query == null) {
        return;
      }
      Set<String> inputs = new LinkedHashSet<>();
      collectInputs(query, inputs);
      DiscoveredTaps.putWrite(table, new ArrayList<>(inputs));
    } catch (Throwable e) {
      DiscoveredTaps.ruleFailed("batch write", e);
    }
  }

  /**
   * The columns of {@code plan} holding a source's raw input. The tap keeps them in the row it
   * captures (it captures the raw row); each round's program masks them.
   */
  private static List<String> corruptColumns(LogicalPlan plan) {
    return CorruptRecordColumns.names(plan, SQLConf.get().columnNameOfCorruptRecord());
  }

  private static List<Attribute> output(LogicalPlan plan) {
    return CollectionConverters.asJava(plan.output());
  }

  private static boolean holdsTap(LogicalPlan plan) {
    if (plan instanceof Filter && TapFunctions.containsGate(((Filter) plan).condition())) {
      return true;
    }
    for (LogicalPlan child : CollectionConverters.asJava(plan.children())) {
      if (holdsTap(child)) {
        return true;
      }
    }
    return false;
  }

  /**
   * {@code plan} with a tap above each temporary view; the names of the views and catalog
   * relations it reads go into {@code inputs} (the vertex's edges).
   */
  private static LogicalPlan tapViews(LogicalPlan plan, Set<String> inputs) {
    if (plan instanceof SubqueryAlias && ((SubqueryAlias) plan).child() instanceof LeafNode) {
      inputs.add(qualified((SubqueryAlias) plan));
      return plan;
    }
    if (plan instanceof View) {
      View view = (View) plan;
      String viewName = view.desc().identifier().table();
      inputs.add(view.isTempView() ? viewName : view.desc().identifier().unquotedString());
      if (!view.isTempView()) {
        return plan;
      }
      // The view's own inputs are the view vertex's edges, not the query's.
      Set<String> viewInputs = new LinkedHashSet<>();
      LogicalPlan child = tapViews(view.child(), viewInputs);
      LogicalPlan inner = child == view.child()
          ? view : view.withNewChildren(TapFunctions.seq(Collections.singletonList(child)));
      String key = VIEW_PREFIX + viewName;
      DiscoveredTaps.put(key, DiscoveredTaps.KIND_VIEW, viewName, inner.schema().json(),
          new ArrayList<>(viewInputs), null, corruptColumns(inner));
      return new Filter(TapFunctions.condition(key, output(inner)), inner);
    }
    List<LogicalPlan> children = CollectionConverters.asJava(plan.children());
    if (children.isEmpty()) {
      return plan;
    }
    List<LogicalPlan> rebuilt = new ArrayList<>(children.size());
    boolean changed = false;
    for (LogicalPlan child : children) {
      LogicalPlan next = tapViews(child, inputs);
      changed |= next != child;
      rebuilt.add(next);
    }
    return changed ? (LogicalPlan) plan.withNewChildren(TapFunctions.seq(rebuilt)) : plan;
  }

  /** The names of the views and catalog relations {@code plan} reads (nothing is tapped). */
  private static void collectInputs(LogicalPlan plan, Set<String> inputs) {
    if (plan instanceof SubqueryAlias && ((SubqueryAlias) plan).child() instanceof LeafNode) {
      inputs.add(qualified((SubqueryAlias) plan));
      return;
    }
    if (plan instanceof View) {
      View view = (View) plan;
      inputs.add(view.isTempView() ? view.desc().identifier().table()
          : view.desc().identifier().unquotedString());
      return;
    }
    for (LogicalPlan child : CollectionConverters.asJava(plan.children())) {
      collectInputs(child, inputs);
    }
  }

  private static String qualified(SubqueryAlias alias) {
    List<String> parts = new ArrayList<>(
        CollectionConverters.asJava(alias.identifier().qualifier()));
    parts.add(alias.identifier().name());
    return String.join(".", parts);
  }

  private static String sinkName(WriteToStream write) {
    if (write.catalogTable().isDefined()) {
      CatalogTable table = write.catalogTable().get();
      return table.identifier().unquotedString();
    }
    if (write.catalogAndIdent().isDefined()) {
      return write.catalogAndIdent().get()._2().toString();
    }
    try {
      return write.sink().name();
    } catch (Throwable e) {
      TapErrors.record(e);
      return null;
    }
  }
}
