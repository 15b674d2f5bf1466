import type { Condition, Machine } from "../api/generated";
import * as api from "../api/v1alpha1";
import type { Tone } from "../components/ui/badge";

export function condition(conds: Condition[] | undefined, type: string): Condition | undefined {
  return conds?.find((c) => c.type === type);
}

/** readyOf is the Ready condition's status of a machine: True, False or Unknown. */
export function readyOf(m: Machine): string {
  return condition(m.conditions, api.ReadyCondition)?.status ?? "Unknown";
}

/** stateOf is one word for the machine's state, and its tone. */
export function stateOf(m: Machine): { text: string; tone: Tone; detail?: string } {
  const ready = condition(m.conditions, api.ReadyCondition);
  if (m.deleting || m.removal?.phase) return { text: `Removing${m.removal?.phase ? ` (${m.removal.phase})` : ""}`, tone: "warn", detail: m.removal?.message };
  const approval = m.approval?.state ?? api.ApprovalPending;
  if (approval === api.ApprovalPending) return { text: "Pending approval", tone: "warn" };
  if (approval === api.ApprovalRejected) return { text: "Rejected", tone: "neutral" };
  if (ready?.status === "True") return { text: api.ReadyCondition, tone: "ok", detail: ready.message };
  if (ready?.status === "False") return { text: ready.reason || "Not ready", tone: "bad", detail: ready.message };
  return { text: ready?.reason || api.ProvisioningReason, tone: "neutral", detail: ready?.message };
}

/** abnormal reports whether a condition is not in its type's healthy status
 * (ConditionHealthyStatus, declared in the API package); types the table
 * does not list only inform. */
export function abnormal(c: Condition): boolean {
  const healthy = api.ConditionHealthyStatus[c.type ?? ""];
  return healthy !== undefined && c.status !== healthy;
}

/** canWrite reports whether the user holds more than ichor:viewer (the backend still checks). */
export function canWrite(groups: string[] | undefined): boolean {
  return (groups ?? []).some((g) => g === "ichor:admin" || g === "ichor:operator" || (g !== "ichor:viewer" && !g.startsWith("system:")));
}

export function timeAgo(ts: string | undefined): string {
  if (!ts) return "—";
  const s = Math.round((Date.now() - Date.parse(ts)) / 1000);
  if (Number.isNaN(s)) return ts;
  if (s < 60) return `${Math.max(s, 0)}s ago`;
  if (s < 3600) return `${Math.round(s / 60)}m ago`;
  if (s < 86400) return `${Math.round(s / 3600)}h ago`;
  return `${Math.round(s / 86400)}d ago`;
}
