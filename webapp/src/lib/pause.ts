import type { Cluster, Discovery } from "../api/generated";
import { timeAgo } from "./status";

/** What a paused cluster's controllers do not do, said once for the CLI's and the console's readers. */
export const pausedEffects = "The controllers do nothing on it: no drift correction, no provisioning, no removal, no operations and no discovery.";

/** formatTime is a timestamp as a person reads it, in their locale. */
export function formatTime(ts: string | undefined): string {
  if (!ts) return "—";
  const t = Date.parse(ts);
  return Number.isNaN(t) ? ts : new Date(t).toLocaleString();
}

/**
 * pausedSince says since when the cluster is paused: the Paused condition's
 * time once the controller confirmed it, or that it has not yet.
 */
export function pausedSince(c: Cluster): string {
  if (!c.paused) return "";
  return c.pausedSince ? `Paused since ${formatTime(c.pausedSince)} (${timeAgo(c.pausedSince)}).` : "Paused; the controller has not confirmed it yet.";
}

/** scanState is the line under Register: the last and the next scan, and a pending request. */
export function scanState(d: Discovery | undefined): string {
  const last = `Last scan ${d?.lastScanTime ? timeAgo(d.lastScanTime) : "not yet"}`;
  if (d?.scanPending) return `${last} · scan requested${d.nextScanTime ? `, due ${formatTime(d.nextScanTime)}` : ", waiting for the controller"}`;
  return d?.nextScanTime ? `${last} · next scan ${formatTime(d.nextScanTime)}` : last;
}

/** whyNoScan says why a scan cannot be asked for now, or "" when it can (the backend checks again). */
export function whyNoScan(c: Cluster | null): string {
  if (!c) return "The cluster is not loaded yet.";
  if (c.paused) return "The cluster is paused: discovery scans nothing until it is resumed on the Overview.";
  if ((c.discovery?.addresses?.length ?? 0) + (c.discovery?.subnets?.length ?? 0) === 0) return "Register an address or a subnet first.";
  return "";
}
