import { useEffect, useState } from "preact/hooks";
import type { AttentionItem, Client } from "../api/generated";
import type { Tone } from "../components/ui/badge";
import { pollMs } from "./connection";

/** The kinds of subject an attention item names (contracts/pkg/attention). */
export const KindCluster = "TalosCluster";
export const KindMachine = "TalosMachine";
export const KindOperation = "TalosOperation";

/** severityTone is the badge tone of an item's severity: Error bad, Warning warn, Info neutral. */
export function severityTone(severity: string | undefined): Tone {
  switch (severity) {
    case "Error":
      return "bad";
    case "Warning":
      return "warn";
    default:
      return "neutral";
  }
}

/** hrefOf is where an item's subject lives in the console, if anywhere. */
export function hrefOf(it: AttentionItem): string | undefined {
  const name = encodeURIComponent(it.subject ?? "");
  if (it.action === "Approve") return "/add-node";
  if (it.kind === KindMachine) return `/nodes/${name}`;
  if (it.kind === KindOperation) return `/operations/${name}`;
  return undefined;
}

/** An item's action as the console offers it: a link, or a button the Overview handles. */
export type ActionOf = { label: string; href: string } | { label: string; run: "apply" | "resumeOperation" | "resumeCluster" } | null;

/** actionOf is the button of an item: Apply and the resumes need write rights; the others are links. */
export function actionOf(it: AttentionItem, canWrite: boolean): ActionOf {
  const name = encodeURIComponent(it.subject ?? "");
  switch (it.action) {
    case "Approve":
      return { label: canWrite ? "Approve…" : "Review", href: "/add-node" };
    case "OpenNode":
      return { label: "Open node", href: `/nodes/${name}` };
    case "OpenOperation":
      return { label: "Open operation", href: `/operations/${name}` };
    case "Apply":
      return canWrite ? { label: "Apply…", run: "apply" } : null;
    case "ResumeOperation":
      return canWrite ? { label: "Resume operation", run: "resumeOperation" } : { label: "Open operation", href: `/operations/${name}` };
    case "ResumeCluster":
      return canWrite ? { label: "Resume cluster", run: "resumeCluster" } : null;
  }
  return null;
}

/** forHow is how long an item has lasted: "for 45s", "for 12m", "for 3h", "for 2d"; "" when not known. */
export function forHow(since: string | undefined, now: number): string {
  if (!since) return "";
  const t = Date.parse(since);
  if (Number.isNaN(t)) return "";
  const s = Math.max(0, Math.floor((now - t) / 1000));
  if (s < 60) return `for ${s}s`;
  if (s < 3600) return `for ${Math.floor(s / 60)}m`;
  if (s < 48 * 3600) return `for ${Math.floor(s / 3600)}h`;
  return `for ${Math.floor(s / 86400)}d`;
}

/** useAttention reads the backend's list when `version` changes (the cluster or a machine changed) and every poll. */
export function useAttention(client: Client, version: string): { items: AttentionItem[] | undefined; incomplete: string[]; error: unknown; reload: () => void } {
  const [items, setItems] = useState<AttentionItem[] | undefined>(undefined);
  const [incomplete, setIncomplete] = useState<string[]>([]);
  const [error, setError] = useState<unknown>(null);
  const [tick, setTick] = useState(0);
  useEffect(() => {
    let stop = false;
    const load = () =>
      client.listAttention().then(
        (r) => {
          if (stop) return;
          setItems(r.items ?? []);
          setIncomplete(r.incomplete ?? []);
          setError(null);
        },
        (e) => !stop && setError(e),
      );
    load();
    const t = setInterval(load, pollMs);
    return () => {
      stop = true;
      clearInterval(t);
    };
  }, [client, version, tick]);
  return { items, incomplete, error, reload: () => setTick((n) => n + 1) };
}
