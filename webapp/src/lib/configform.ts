/**
 * The form generator of the Configuration page: TalosConfigPatch documents
 * edited through forms generated from the typed schema
 * (src/api/configschema.json, tools/cmd/formschemagen, which reads the CRD:
 * secret fields are not in it, so no form offers one). There is no YAML
 * editor: a document is the JSON object the CRD stores, a form reads and
 * writes it field by field at paths, and whatever the form does not touch is
 * kept, so a patch round-trips losslessly between the form and the CR.
 */

import type { ConfigPatch } from "../api/generated";

/** SchemaNode is one field of the generated schema. */
export interface SchemaNode {
  type: string;
  doc?: string;
  enum?: string[];
  /** The documented keys of a map (suggestions). */
  keys?: string[];
  default?: unknown;
  format?: string;
  min?: number;
  max?: number;
  pattern?: string;
  required?: string[];
  maxProps?: number;
  props?: Record<string, SchemaNode>;
  items?: SchemaNode;
  values?: SchemaNode;
  /** How a change reaches a node, where it differs from the parent's: NoReboot, InstallOnly, APIServerRestart, RebootRequired. */
  class?: string;
  /** Why the field is privileged, where the parent is not. */
  privileged?: string;
}

/** KindSchema is one document kind of the allow-list. */
export interface KindSchema {
  kind: string;
  /** The key of spec.documents[] that holds it (sysctlConfig). */
  key: string;
  since?: string;
  schema: SchemaNode;
}

/** ConfigSchema is the generated file. */
export interface ConfigSchema {
  kinds: KindSchema[];
  secretFields: string[];
}

/** loadSchema loads the generated schema (a chunk of its own: only the Configuration page needs it). */
export async function loadSchema(): Promise<ConfigSchema> {
  const m = await import("../api/configschema.json");
  return (m.default ?? m) as unknown as ConfigSchema;
}

export type Path = (string | number)[];
export type Json = null | boolean | number | string | Json[] | { [k: string]: Json };
export type Obj = { [k: string]: Json };
/** A document of spec.documents[]: one key, the kind's (sysctlConfig), holding the typed document. */
export type PatchDocument = Obj;

/** Control is how a leaf is edited. */
export type Control = "text" | "number" | "bool" | "select" | "presence";

/** Field is one control of a generated form, or a group (object, list, map) of them. */
export interface Field {
  /** Path of the value inside the document. */
  path: Path;
  /** Schema path, as configmeta and the privileged table spell it: Kind:a.b[].c{*}. */
  schemaPath: string;
  name: string;
  node: SchemaNode;
  /** Inherited from the parents. */
  privileged?: string;
  cls: string;
  kind: "leaf" | "object" | "list" | "map";
  control?: Control;
  children?: Field[];
}

/** Options of the generator. */
export interface FormOptions {
  /** The user may write privileged configuration (`update` on talosconfigpatches/privileged); otherwise privileged fields are left out. */
  privileged: boolean;
}

/** kindsOffered are the kinds a user may add: all, less the privileged ones for a user without the verb. */
export function kindsOffered(schema: ConfigSchema, o: FormOptions): KindSchema[] {
  return schema.kinds.filter((k) => o.privileged || !k.schema.privileged);
}

/** controlOf is the control of a scalar node. */
export function controlOf(n: SchemaNode): Control {
  if (n.enum?.length) return "select";
  switch (n.type) {
    case "integer":
    case "number":
      return "number";
    case "boolean":
      return "bool";
    case "object":
      return "presence";
    default:
      return "text";
  }
}

function isGroup(n: SchemaNode): "object" | "list" | "map" | null {
  if (n.type === "object" && n.props && Object.keys(n.props).length) return "object";
  if (n.type === "array") return "list";
  if (n.type === "map") return "map";
  return null;
}

/** fields generates the form of a node at the value: object properties in name order, one entry per list element and map key present in the value. */
export function fields(k: KindSchema, doc: Json | undefined, o: FormOptions): Field[] {
  return childrenOf(k.schema, doc, [], `${k.kind}:`, k.schema.privileged, k.schema.class ?? "NoReboot", o);
}

function join(sp: string, name: string): string {
  return sp.endsWith(":") ? sp + name : `${sp}.${name}`;
}

function childrenOf(n: SchemaNode, v: Json | undefined, path: Path, sp: string, priv: string | undefined, cls: string, o: FormOptions): Field[] {
  const out: Field[] = [];
  const g = isGroup(n);
  if (g === "object") {
    for (const name of Object.keys(n.props!).sort()) {
      const f = field(n.props![name], get(v, [name]), [...path, name], join(sp, name), name, priv, cls, o);
      if (f) out.push(f);
    }
  } else if (g === "list") {
    const list = Array.isArray(v) ? v : [];
    list.forEach((item, i) => {
      const f = field(n.items!, item, [...path, i], `${sp}[]`, `${i + 1}`, priv, cls, o);
      if (f) out.push(f);
    });
  } else if (g === "map") {
    const m = v && typeof v === "object" && !Array.isArray(v) ? v : {};
    for (const key of Object.keys(m).sort()) {
      const f = field(n.values!, m[key], [...path, key], `${sp}{*}`, key, priv, cls, o);
      if (f) out.push(f);
    }
  }
  return out;
}

function field(n: SchemaNode, v: Json | undefined, path: Path, sp: string, name: string, priv: string | undefined, cls: string, o: FormOptions): Field | null {
  const p = n.privileged ?? priv;
  if (p && !o.privileged) return null;
  const c = n.class ?? cls;
  const g = isGroup(n);
  if (!g) return { path, schemaPath: sp, name, node: n, privileged: p, cls: c, kind: "leaf", control: controlOf(n) };
  return { path, schemaPath: sp, name, node: n, privileged: p, cls: c, kind: g, children: childrenOf(n, v, path, sp, p, c, o) };
}

/** get reads the value at path. */
export function get(v: Json | undefined, path: Path): Json | undefined {
  let cur: Json | undefined = v;
  for (const k of path) {
    if (cur === null || cur === undefined || typeof cur !== "object") return undefined;
    cur = (cur as Record<string | number, Json>)[k as never];
  }
  return cur;
}

/** set returns the value with path set; undefined removes the key (a list element is removed from the list). */
export function set(v: Json | undefined, path: Path, value: Json | undefined): Json | undefined {
  if (!path.length) return value;
  const [k, ...rest] = path;
  if (typeof k === "number") {
    const list = Array.isArray(v) ? [...v] : [];
    const next = set(list[k], rest, value);
    if (next === undefined) list.splice(k, 1);
    else list[k] = next;
    return list;
  }
  const obj: Obj = v && typeof v === "object" && !Array.isArray(v) ? { ...v } : {};
  const next = set(obj[k], rest, value);
  if (next === undefined) delete obj[k];
  else obj[k] = next;
  return obj;
}

/** display is a leaf's value as its control shows it. */
export function display(n: SchemaNode, v: Json | undefined): string | boolean {
  const c = controlOf(n);
  if (c === "presence") return v !== undefined && v !== null;
  if (v === undefined || v === null) return "";
  if (c === "bool") return v === true ? "true" : v === false ? "false" : "";
  return String(v);
}

/** parse is a control's input as the leaf's value, or an error naming what is wrong; undefined leaves it unset. */
export function parse(n: SchemaNode, input: string | boolean): { value?: Json; error?: string } {
  const c = controlOf(n);
  if (c === "presence") return { value: input ? {} : undefined };
  const s = String(input);
  if (s === "") return {};
  switch (c) {
    case "bool":
      return { value: s === "true" };
    case "number": {
      const x = Number(s.trim());
      if (!Number.isFinite(x) || (n.type === "integer" && !Number.isInteger(x))) return { error: n.type === "integer" ? "a whole number" : "a number" };
      if (n.min !== undefined && x < n.min) return { error: `at least ${n.min}` };
      if (n.max !== undefined && x > n.max) return { error: `at most ${n.max}` };
      return { value: x };
    }
    default:
      if (n.type === "intOrString" && /^-?\d+$/.test(s)) return { value: Number(s) };
      if (n.pattern && !new RegExp(n.pattern).test(s)) return { error: `must match ${n.pattern}` };
      return { value: s };
  }
}

/** emptyOf is what "Add" puts in a list or a map. */
export function emptyOf(n: SchemaNode): Json {
  if (isGroup(n) === "object" || n.type === "object") return {};
  if (n.type === "array") return [];
  if (n.type === "map") return {};
  return "";
}

/** kindOf names the kind of a document (its one key), or null. */
export function kindOf(schema: ConfigSchema, d: PatchDocument): KindSchema | null {
  const keys = Object.keys(d);
  if (keys.length !== 1) return null;
  return schema.kinds.find((k) => k.key === keys[0]) ?? null;
}

/** documentsOf parses a ConfigPatch's documentsJson. */
export function documentsOf(json: string | undefined): PatchDocument[] {
  if (!json) return [];
  const v = JSON.parse(json) as unknown;
  return Array.isArray(v) ? (v as PatchDocument[]) : [];
}

/** Layers, bottom-up, as they apply. */
export const layers = ["cluster", "role", "selector", "machine"] as const;

/** PatchForm is the editable part of a patch besides its documents. */
export interface PatchForm {
  name: string;
  layer: string;
  priority: string;
  role: string;
  /** matchLabels as key=value,key=value; the selector's other parts are kept from the original. */
  labels: string;
  machine: string;
  documents: PatchDocument[];
  /** The original selector (matchExpressions are kept as they are). */
  selector?: { matchLabels?: Record<string, string>; matchExpressions?: unknown[] };
  resourceVersion?: string;
}

/** formOfPatch is the form of a stored patch. */
export function formOfPatch(p: ConfigPatch): PatchForm {
  const selector = p.targetSelectorJson ? (JSON.parse(p.targetSelectorJson) as PatchForm["selector"]) : undefined;
  return {
    name: p.name ?? "",
    layer: p.layer ?? "cluster",
    priority: p.priority ? String(p.priority) : "",
    role: p.targetRole ?? "",
    labels: Object.entries(selector?.matchLabels ?? {})
      .map(([k, v]) => `${k}=${v}`)
      .join(","),
    machine: p.targetMachine ?? "",
    documents: documentsOf(p.documentsJson),
    selector,
    resourceVersion: p.resourceVersion,
  };
}

/** newForm is the form of a new patch. */
export function newForm(): PatchForm {
  return { name: "", layer: "cluster", priority: "", role: "", labels: "", machine: "", documents: [] };
}

/** patchOfForm is the ConfigPatch a form writes, or the errors by field. */
export function patchOfForm(f: PatchForm): { patch?: ConfigPatch; errors: Record<string, string> } {
  const errors: Record<string, string> = {};
  if (!/^[a-z0-9]([-a-z0-9.]*[a-z0-9])?$/.test(f.name)) errors.name = "A name of lower-case letters, digits, - and .; it must start and end with a letter or digit.";
  let priority = 0;
  if (f.priority.trim() !== "") {
    priority = Number(f.priority);
    if (!Number.isInteger(priority) || priority < -1000 || priority > 1000) errors.priority = "A whole number from -1000 to 1000.";
  }
  const p: ConfigPatch = { name: f.name, layer: f.layer, priority, documentsJson: JSON.stringify(f.documents), resourceVersion: f.resourceVersion };
  if (f.layer === "role") {
    if (f.role !== "controlplane" && f.role !== "worker") errors.role = "Choose controlplane or worker.";
    p.targetRole = f.role;
  }
  if (f.layer === "machine") {
    if (!f.machine) errors.machine = "Choose the machine.";
    p.targetMachine = f.machine;
  }
  if (f.layer === "selector") {
    const labels: Record<string, string> = {};
    for (const part of f.labels.split(",").map((s) => s.trim()).filter(Boolean)) {
      const i = part.indexOf("=");
      if (i <= 0) {
        errors.labels = `"${part}" is not key=value.`;
        break;
      }
      labels[part.slice(0, i).trim()] = part.slice(i + 1).trim();
    }
    const sel: NonNullable<PatchForm["selector"]> = { ...(f.selector ?? {}) };
    if (Object.keys(labels).length) sel.matchLabels = labels;
    else delete sel.matchLabels;
    if (!sel.matchLabels && !sel.matchExpressions?.length) errors.labels = "Give at least one label, as zone=a.";
    p.targetSelectorJson = JSON.stringify(sel);
  }
  if (!f.documents.length) errors.documents = "Add at least one document.";
  return { patch: Object.keys(errors).length ? undefined : p, errors };
}

/** hidesPrivileged reports whether a patch carries privileged configuration a user without the verb may not see or change. */
export function hidesPrivileged(p: ConfigPatch | undefined, privileged: boolean): boolean {
  return !privileged && !!p?.privilegedPaths?.length;
}

/** leaves lists every leaf field of a form, depth first. */
export function leaves(fs: Field[]): Field[] {
  return fs.flatMap((f) => (f.kind === "leaf" ? [f] : leaves(f.children ?? [])));
}

/** modeText says how a change reaches a machine, for people. */
export function modeText(mode: string | undefined, waits: boolean | undefined): string {
  const m: Record<string, string> = {
    none: "no change",
    "no-reboot": "applied live, no reboot",
    staged: "staged until the next install or upgrade",
    "kube-apiserver-restart": "restarts the kube-apiserver",
    reboot: "needs a reboot",
  };
  const t = m[mode ?? ""] ?? mode ?? "";
  return waits ? `${t}; waits for a config rollout (Apply in the Overview)` : t;
}

/** classText says what a field's change needs, for the form's marks. */
export function classText(cls: string): string | null {
  switch (cls) {
    case "RebootRequired":
      return "reboot";
    case "InstallOnly":
      return "install time";
    case "APIServerRestart":
      return "kube-apiserver restart";
    default:
      return null;
  }
}

/** DocumentErrors are machinery's errors placed on a document's fields: by the field's path key (pathKey), or on the document as a whole. */
export interface DocumentErrors {
  fields: Record<string, string[]>;
  document: string[];
}

/** pathKey is a field's key in DocumentErrors. */
export function pathKey(path: Path): string {
  return path.join(".");
}

/**
 * placeErrors puts each validation error of the impact preview on the field
 * it names. machinery's messages name the document ("VLANConfig/eth0.10:
 * parent must be specified") and the field by its YAML name; an error that
 * names no document of the patch stays with the patch (what is left over).
 */
export function placeErrors(schema: ConfigSchema, docs: PatchDocument[], errors: string[], o: FormOptions): { byDoc: DocumentErrors[]; rest: string[] } {
  const byDoc: DocumentErrors[] = docs.map(() => ({ fields: {}, document: [] }));
  const rest: string[] = [];
  for (const e of errors) {
    let placed = false;
    docs.forEach((d, i) => {
      if (placed) return;
      const k = kindOf(schema, d);
      if (!k) return;
      const body = d[k.key] as Obj | undefined;
      const name = typeof body?.name === "string" ? body.name : "";
      const id = name ? `${k.kind}/${name}` : k.kind;
      const at = e.indexOf(`${id}:`);
      if (at < 0 || (name === "" && e.slice(at, at + id.length + 1) !== `${k.kind}:`)) return;
      const msg = e.slice(at + id.length + 1).trim();
      // The longest field name the message mentions as a word.
      let best: Field | null = null;
      const fs = fields(k, body, o);
      const walk = (list: Field[]) => {
        for (const f of list) {
          if (typeof f.path[f.path.length - 1] === "string" && new RegExp(`(^|[^\\w])${escapeRe(f.name)}([^\\w]|$)`).test(msg)) {
            if (!best || f.name.length > best.name.length || (f.name.length === best.name.length && f.path.length < best.path.length)) best = f;
          }
          walk(f.children ?? []);
        }
      };
      walk(fs);
      const found = best as Field | null;
      if (found) (byDoc[i].fields[pathKey(found.path)] ??= []).push(msg);
      else byDoc[i].document.push(msg);
      placed = true;
    });
    if (!placed) rest.push(e);
  }
  return { byDoc, rest };
}

function escapeRe(s: string): string {
  return s.replace(/[.*+?^${}()|[\]\\]/g, "\\$&");
}
