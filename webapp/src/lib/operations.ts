import { useEffect, useState } from "preact/hooks";
import type { Client, Operation, Settings, UpdateSettingsRequest } from "../api/generated";
import type { Tone } from "../components/ui/badge";
import * as api from "../api/v1alpha1";

/** finished reports whether an operation has completed for good. */
export function finished(op: Operation): boolean {
  return op.phase === api.OperationSucceeded || op.phase === api.OperationFailed;
}

/** current is the operation in progress (running, paused, pending or awaiting credentials), newest first; undefined when none. */
export function current(ops: Operation[] | undefined): Operation | undefined {
  return ops?.find((op) => !finished(op));
}

/** phaseTone is the badge tone of an operation's phase. */
export function phaseTone(op: Operation): Tone {
  switch (op.phase) {
    case api.OperationSucceeded:
      return "ok";
    case api.OperationFailed:
      return "bad";
    case api.OperationPaused:
    case api.OperationAwaitingCredentials:
      return op.failureReason ? "bad" : "warn";
    default:
      return op.paused ? "warn" : "neutral";
  }
}

/** phaseText is the phase as shown, saying when a pause was asked for and not reached yet. */
export function phaseText(op: Operation): string {
  const phase = op.phase || api.OperationPending;
  if (op.paused && phase !== api.OperationPaused && !finished(op)) return `${phase} (pausing)`;
  return phase;
}

/** machineTone is the badge tone of a machine's state in an operation: done ok, failed bad, in progress or held warn, else (pending, skipped) neutral. */
export function machineTone(state: string | undefined): Tone {
  switch (state) {
    case api.MachineDone:
      return "ok";
    case api.MachineFailed:
      return "bad";
    case api.MachineInProgress:
    case api.MachineHeld:
      return "warn";
    default:
      return "neutral";
  }
}

/** fromTo is "from → to", or the one that is known. */
export function fromTo(op: Operation): string {
  if (op.from && op.to) return `${op.from} → ${op.to}`;
  return op.to ? `→ ${op.to}` : op.from || "—";
}

/** canPause: the operation has not finished and nobody asked for a pause yet. */
export function canPause(op: Operation): boolean {
  return !finished(op) && !op.paused;
}

/** canResume: a person paused it, or it paused on a failed step. */
export function canResume(op: Operation): boolean {
  return !finished(op) && (!!op.paused || !!op.failureReason);
}

/** useOperations lists the operations and lists them again every few seconds. */
export function useOperations(client: Client, everyMs = 5000): { ops: Operation[] | undefined; error: unknown; reload: () => void } {
  const [ops, setOps] = useState<Operation[] | undefined>(undefined);
  const [error, setError] = useState<unknown>(null);
  const [tick, setTick] = useState(0);
  useEffect(() => {
    let stop = false;
    const load = () =>
      client.listOperations().then(
        (r) => {
          if (stop) return;
          setOps(r.operations ?? []);
          setError(null);
        },
        (e) => !stop && setError(e),
      );
    load();
    const t = setInterval(load, everyMs);
    return () => {
      stop = true;
      clearInterval(t);
    };
  }, [client, tick, everyMs]);
  return { ops, error, reload: () => setTick((x) => x + 1) };
}

/** canAdmin reports whether the user may hold ichor-admin's rights (the backend still checks). */
export function canAdmin(groups: string[] | undefined): boolean {
  return (groups ?? []).some((g) => g === "ichor:admin" || (!g.startsWith("ichor:") && !g.startsWith("system:")));
}

/** SettingsForm is what the Settings page edits: an empty field means the default. */
export interface SettingsForm {
  idTokenLifetime: string;
  refreshTokenLifetime: string;
  defaultDriftPolicy: string;
}

export const settingNames = {
  idTokenLifetime: "id_token_lifetime",
  refreshTokenLifetime: "refresh_token_lifetime",
  defaultDriftPolicy: "default_drift_policy",
} as const;

/** formOf is the form filled from the settings read. */
export function formOf(s: Settings | undefined): SettingsForm {
  return { idTokenLifetime: s?.idTokenLifetime ?? "", refreshTokenLifetime: s?.refreshTokenLifetime ?? "", defaultDriftPolicy: s?.defaultDriftPolicy ?? "" };
}

/**
 * settingsUpdate is the request that turns the settings read into the form:
 * a changed field is set, a field emptied is reset to its default (clear),
 * and the resourceVersion read guards against a change made meanwhile.
 * It is undefined when nothing changed.
 */
export function settingsUpdate(read: Settings | undefined, form: SettingsForm): UpdateSettingsRequest | undefined {
  const before = formOf(read);
  const req: UpdateSettingsRequest = { clear: [], resourceVersion: read?.resourceVersion };
  for (const k of Object.keys(settingNames) as (keyof SettingsForm)[]) {
    const v = form[k].trim();
    if (v === before[k]) continue;
    if (v === "") req.clear!.push(settingNames[k]);
    else req[k] = v;
  }
  if (req.clear!.length === 0 && !req.idTokenLifetime && !req.refreshTokenLifetime && !req.defaultDriftPolicy) return undefined;
  if (req.clear!.length === 0) delete req.clear;
  return req;
}
