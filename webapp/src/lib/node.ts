import type { Condition, ConfigEntry, DiskSelector, Machine, MachineNetwork, TalosService } from "../api/generated";
import * as api from "../api/v1alpha1";
import type { Tone } from "../components/ui/badge";

export type NodeTab = "summary" | "storage" | "talos" | "kubernetes" | "config" | "logs";

/** The node page's tabs, in order; the first is the page's own address. */
export const nodeTabs: { id: NodeTab; label: string }[] = [
  { id: "summary", label: "Summary" },
  { id: "storage", label: "Storage & network" },
  { id: "talos", label: "Talos" },
  { id: "kubernetes", label: "Kubernetes & etcd" },
  { id: "config", label: "Configuration" },
  { id: "logs", label: "Logs" },
];

/** activeTab is the tab the address names, or the summary for an unknown one. */
export function activeTab(tab: string): NodeTab {
  return nodeTabs.find((t) => t.id === tab)?.id ?? "summary";
}

/** tabHref is a tab's address: /nodes/<name> for the summary, /nodes/<name>/<tab> for the others. */
export function tabHref(name: string, tab: string): string {
  const base = `/nodes/${encodeURIComponent(name)}`;
  return tab === "summary" ? base : `${base}/${tab}`;
}

/** canRemove reports whether the page offers removal: a writer, an approved machine, not being deleted (the backend still checks). */
export function canRemove(m: Machine, canWrite: boolean): boolean {
  return canWrite && m.approval?.state === api.ApprovalApproved && !m.deleting;
}

/** isControlPlane reports whether the machine runs an etcd member. */
export function isControlPlane(m: Machine): boolean {
  return m.role === api.RoleControlPlane;
}

/** conditionTone is the badge tone of a condition by meaning: ok in its
 * type's healthy status (ConditionHealthyStatus), bad when a condition that
 * should be True is not, warn when one that should be False is True, and
 * neutral for the types that only inform. */
export function conditionTone(c: Condition): Tone {
  const healthy = api.ConditionHealthyStatus[c.type ?? ""];
  if (healthy === undefined) return "neutral";
  if (c.status === healthy) return "ok";
  return healthy === "True" ? "bad" : "warn";
}

/** selectorText is a disk selector as key=value (its first set key), undefined when none is set. */
export function selectorText(sel: DiskSelector | undefined): string | undefined {
  const k = sel ? Object.entries(sel).find(([, v]) => v) : undefined;
  return k ? `${k[0]}=${k[1]}` : undefined;
}

/** networkText says how the primary NIC is configured: DHCP, or static addresses via the gateway, and the VLAN. */
export function networkText(n: MachineNetwork): string {
  const how = n.dhcp ? "DHCP" : `static ${n.addresses?.join(", ")} via ${n.gateway || "—"}`;
  return `${how}${n.vlan ? `, VLAN ${n.vlan}` : ""}`;
}

/** serviceHealth is a Talos service's health as shown: unknown, healthy or unhealthy (with its message). */
export function serviceHealth(s: TalosService): { text: string; tone: Tone; title?: string } {
  if (s.healthUnknown) return { text: "unknown", tone: "neutral" };
  if (s.healthy) return { text: "healthy", tone: "ok" };
  return { text: "unhealthy", tone: "bad", title: s.healthMessage };
}

/** configEntryMatches reports whether an effective-config entry contains the typed text (no case) in its document, field or origin; empty text matches all. */
export function configEntryMatches(e: ConfigEntry, text: string): boolean {
  return !text || `${e.kind} ${e.documentName} ${e.field} ${e.originLayer} ${e.originPatch}`.toLowerCase().includes(text.toLowerCase());
}
