import type { Condition } from "../api/generated";
import type { Tone } from "../components/ui/badge";

/** The healthy status of a Kubernetes Node's condition types: Ready is healthy when True, the pressures when False. */
const kubeHealthy: Record<string, string> = {
  Ready: "True",
  MemoryPressure: "False",
  DiskPressure: "False",
  PIDPressure: "False",
  NetworkUnavailable: "False",
};

/** kubeConditionTone colours a Node condition by meaning: ok when healthy, bad when Ready is not True, warn for a pressure; neutral for a type not known. */
export function kubeConditionTone(c: Condition): Tone {
  const healthy = kubeHealthy[c.type ?? ""];
  if (healthy === undefined) return "neutral";
  if (c.status === healthy) return "ok";
  return c.type === "Ready" ? "bad" : "warn";
}

/** bytes is a size in binary units: 512 B, 1.5 KiB, 8.0 GiB. */
export function bytes(n: number): string {
  if (!Number.isFinite(n) || n < 1024) return `${Math.max(0, Math.round(n || 0))} B`;
  const units = ["KiB", "MiB", "GiB", "TiB", "PiB"];
  let v = n / 1024;
  let i = 0;
  while (v >= 1024 && i < units.length - 1) {
    v /= 1024;
    i++;
  }
  return `${v.toFixed(1)} ${units[i]}`;
}

/** percent is a 0–1 share as a whole percentage. */
export function percent(share: number | undefined): string {
  return `${Math.round((share ?? 0) * 100)}%`;
}

/** uptime is how long since boot: "3d 4h", "5h 12m", "12m"; "—" when not known. */
export function uptime(boot: string | undefined, now: number): string {
  if (!boot) return "—";
  const t = Date.parse(boot);
  if (Number.isNaN(t)) return "—";
  const m = Math.max(0, Math.floor((now - t) / 60000));
  const d = Math.floor(m / 1440);
  const h = Math.floor((m % 1440) / 60);
  if (d > 0) return `${d}d ${h}h`;
  if (h > 0) return `${h}h ${m % 60}m`;
  return `${m}m`;
}
