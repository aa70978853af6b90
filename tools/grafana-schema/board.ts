// Grafana's types a dashboard's JSON is checked against (harness/grafana_schema.py appends
// `export const dashboard: Board = <the JSON>;` and runs `tsc --strict` on the result): the dashboard
// model and the core panels' options and field config from @grafana/schema, the Prometheus query from
// @grafana/grafana-foundation-sdk. Every panel kind the dashboard uses must be typed here.
import type { Dashboard, FieldConfig, FieldConfigSource, Panel, RowPanel, VariableModel } from "@grafana/schema";
import type {
  FieldConfig as TimeSeriesFieldConfig,
  Options as TimeSeriesOptions,
} from "@grafana/schema/dist/esm/raw/composable/timeseries/panelcfg/x/TimeSeriesPanelCfg_types.gen";
import type { Options as StatOptions } from "@grafana/schema/dist/esm/raw/composable/stat/panelcfg/x/StatPanelCfg_types.gen";
import type { dataquery as PrometheusQuery } from "@grafana/grafana-foundation-sdk/prometheus";

// the types as JSON writes them: a string enum's members as their values
type Json<T> = T extends string
  ? `${T}`
  : T extends (infer U)[]
    ? Json<U>[]
    : T extends object
      ? { [K in keyof T]: Json<T[K]> }
      : T;

type Query = Json<Omit<PrometheusQuery, "_implementsDataqueryVariant">>;
type Fields<Custom> = Json<
  Omit<FieldConfigSource, "defaults"> & { defaults: Omit<FieldConfig, "custom"> & { custom?: Custom } }
>;
// a panel of one kind: its options, field config and queries typed (Panel's own are open records)
type PanelOf<Kind extends string, Options, Custom> = Json<Omit<Panel, "type" | "options" | "fieldConfig" | "targets">> & {
  type: Kind;
  options: Json<Options>;
  fieldConfig: Fields<Custom>;
  targets: Query[];
};
type Row = Json<Omit<RowPanel, "type" | "panels">> & { type: "row"; panels: never[] };

// the panel kinds (PANEL_TYPES in harness/grafana_schema.py)
type AnyPanel = PanelOf<"timeseries", TimeSeriesOptions, TimeSeriesFieldConfig> | PanelOf<"stat", StatOptions, never> | Row;

export type Board = Json<Omit<Dashboard, "panels" | "templating">> & {
  panels: AnyPanel[];
  templating: { list: Json<VariableModel>[] };
};
