import type { DiscoveredDisk, DiskSelector } from "../api/generated";

/** StableKey is the attribute a disk is keyed on, best first. */
export type StableKey = "wwid" | "serial" | "byId" | "busPath" | "devicePath";

/** The fallback order of a disk's stable key (architecture, "Nodes"; DiscoveredDisk.StableSelector). */
export const stableOrder: StableKey[] = ["wwid", "serial", "byId", "busPath", "devicePath"];

export const stableLabel: Record<StableKey, string> = {
  wwid: "WWID",
  serial: "serial",
  byId: "by-id path",
  busPath: "bus path",
  devicePath: "device path",
};

/** stableKey picks the first attribute the disk has: WWID > serial > by-id > bus path > device path. */
export function stableKey(d: DiscoveredDisk): { key: StableKey; value: string } | null {
  for (const k of stableOrder) {
    const v = d[k];
    if (v) return { key: k, value: v };
  }
  return null;
}

/** selectorOf is the DiskSelector that names the disk by its stable key only. */
export function selectorOf(d: DiscoveredDisk): DiskSelector {
  const s = stableKey(d);
  return s ? { [s.key]: s.value } : {};
}

/** isStable reports whether the key survives a reboot (the device path does not). */
export function isStable(k: StableKey): boolean {
  return k !== "devicePath";
}

/** matches reports whether a selector names the disk (WWID compared without case). */
export function matches(sel: DiskSelector | undefined, d: DiscoveredDisk): boolean {
  if (!sel) return false;
  for (const k of stableOrder) {
    const want = sel[k];
    if (!want) continue;
    const have = d[k] ?? "";
    return k === "wwid" ? want.toLowerCase() === have.toLowerCase() : want === have;
  }
  return false;
}

/** bytes formats a size in binary units. */
export function bytes(n: string | number | undefined): string {
  const v = Number(n ?? 0);
  if (!v) return "—";
  const units = ["B", "KiB", "MiB", "GiB", "TiB", "PiB"];
  let i = 0;
  let x = v;
  while (x >= 1024 && i < units.length - 1) {
    x /= 1024;
    i++;
  }
  return `${x >= 100 || i === 0 ? Math.round(x) : x.toFixed(1)} ${units[i]}`;
}
