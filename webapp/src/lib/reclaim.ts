import type { DiscoveryResult, Reclaim } from "../api/generated";
import type { Tone } from "../components/ui/badge";
import * as api from "../api/v1alpha1";

/** reclaimable is the addresses discovery found configured by another cluster ("AlreadyConfigured"), sorted and without repeats. */
export function reclaimable(results: DiscoveryResult[] | undefined): string[] {
  const out = new Set<string>();
  for (const r of results ?? []) if (r.result === api.DiscoveryResultAlreadyConfigured && r.address) out.add(r.address);
  return [...out].sort();
}

/** reclaimFinished reports whether a reclaim has ended for good (its credential is deleted). */
export function reclaimFinished(r: Reclaim | undefined): boolean {
  return r?.phase === api.ReclaimDone || r?.phase === api.ReclaimFailed || r?.phase === api.ReclaimExpired;
}

/** reclaimTone is the badge tone of a reclaim's phase. */
export function reclaimTone(r: Reclaim): Tone {
  switch (r.phase) {
    case api.ReclaimDone:
      return "ok";
    case api.ReclaimFailed:
    case api.ReclaimExpired:
      return "bad";
    case api.ReclaimAwaitingConfirmation:
      return r.inspection?.refusals?.length ? "bad" : "warn";
    default:
      return "neutral";
  }
}

/** canConfirm reports whether the reclaim waits for the typed UUID and nothing refuses the reset. */
export function canConfirm(r: Reclaim | undefined): boolean {
  return r?.phase === api.ReclaimAwaitingConfirmation && !r.confirmed && !r.inspection?.refusals?.length && !!r.inspection?.uuid;
}

/** uuidMatches compares a typed UUID with the machine's as the backend does: no case, no surrounding spaces. */
export function uuidMatches(typed: string, uuid: string | undefined): boolean {
  return !!uuid && typed.trim().toLowerCase() === uuid.toLowerCase();
}

/** isIP is a light check of an IPv4 or IPv6 address before asking the backend, which checks it for good. */
export function isIP(s: string): boolean {
  const v = s.trim();
  if (/^(\d{1,3})\.(\d{1,3})\.(\d{1,3})\.(\d{1,3})$/.test(v)) return v.split(".").every((p) => Number(p) <= 255);
  // IPv6 has at least two colons; one colon is an address with a port.
  return (v.match(/:/g)?.length ?? 0) >= 2 && /^[0-9a-fA-F:.]+$/.test(v);
}
