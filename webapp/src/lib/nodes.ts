import type { Machine } from "../api/generated";
import * as api from "../api/v1alpha1";
import { stateOf } from "./status";

/** The Nodes list's columns that sort. */
export type SortKey = "name" | "state" | "role" | "address" | "talos" | "stage";
export type SortDir = "asc" | "desc";

/** The state filter: every machine, those with a problem, the ready ones, those waiting for approval. */
export type StateFilter = "all" | "problems" | "ready" | "pending";

const toneRank = { bad: 0, warn: 1, neutral: 2, ok: 3 } as const;

/** stateKey orders states by meaning: problems first, then waiting, then work in progress, ready last. */
function stateKey(m: Machine): string {
  const s = stateOf(m);
  return `${toneRank[s.tone]}-${s.text}`;
}

/** ipKey compares IPv4 addresses numerically (10.0.0.9 before 10.0.0.10). */
function ipKey(a: string | undefined): string {
  const parts = (a ?? "").split(".");
  return parts.length === 4 && parts.every((p) => /^\d+$/.test(p)) ? parts.map((p) => p.padStart(3, "0")).join(".") : (a ?? "");
}

const keyOf: Record<SortKey, (m: Machine) => string> = {
  name: (m) => m.name ?? "",
  state: stateKey,
  role: (m) => m.role ?? "",
  address: (m) => ipKey(m.address),
  talos: (m) => m.talosVersion ?? "",
  stage: (m) => m.stage ?? "",
};

/** sortMachines sorts by a column, the name breaking ties; it does not change its input. */
export function sortMachines(ms: Machine[], key: SortKey, dir: SortDir): Machine[] {
  const k = keyOf[key];
  const out = [...ms].sort((a, b) => k(a).localeCompare(k(b), undefined, { numeric: true }) || (a.name ?? "").localeCompare(b.name ?? ""));
  return dir === "desc" ? out.reverse() : out;
}

/** matches reports whether a machine passes the text (name, hostname, address, role, Talos version; no case) and the state filter. */
export function matches(m: Machine, text: string, state: StateFilter): boolean {
  const t = text.trim().toLowerCase();
  if (t && !`${m.name} ${m.hostname ?? ""} ${m.address ?? ""} ${m.role ?? ""} ${m.talosVersion ?? ""}`.toLowerCase().includes(t)) return false;
  const s = stateOf(m);
  switch (state) {
    case "problems":
      return (s.tone === "bad" || s.tone === "warn") && m.approval?.state !== api.ApprovalPending;
    case "ready":
      return s.tone === "ok";
    case "pending":
      return m.approval?.state === api.ApprovalPending;
  }
  return true;
}
