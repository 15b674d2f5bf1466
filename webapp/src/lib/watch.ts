import { ApiError, Code } from "../api/errors";
import type { Client, Machine, WatchMachinesResponse } from "../api/generated";

/** MachineSet is the machines a watch has seen, by name. */
export interface MachineSet {
  machines: Map<string, Machine>;
  /** True once the snapshot is complete. */
  synced: boolean;
  /** The token to resume after the last event. */
  token: string;
}

export function emptySet(): MachineSet {
  return { machines: new Map(), synced: false, token: "" };
}

/**
 * apply folds one event into the set. While a snapshot is read again (after
 * an expired token) the events go to `next`, which replaces the set at SYNCED,
 * so the list does not flicker empty.
 */
export function apply(set: MachineSet, ev: WatchMachinesResponse, next?: Map<string, Machine>): MachineSet {
  const out: MachineSet = { machines: set.machines, synced: set.synced, token: ev.resumeToken || set.token };
  const target = next ?? new Map(set.machines);
  const name = ev.machine?.name;
  switch (ev.type) {
    case "EVENT_TYPE_ADDED":
    case "EVENT_TYPE_MODIFIED":
      if (name && ev.machine) target.set(name, ev.machine);
      break;
    case "EVENT_TYPE_DELETED":
      if (name) target.delete(name);
      break;
    case "EVENT_TYPE_SYNCED":
      out.synced = true;
      out.machines = new Map(target);
      return out;
    default:
      return out;
  }
  if (!next) out.machines = target;
  return out;
}

/** sorted is the machines in name order. */
export function sorted(set: MachineSet): Machine[] {
  return Array.from(set.machines.values()).sort((a, b) => (a.name ?? "").localeCompare(b.name ?? ""));
}

/**
 * watchMachines keeps a MachineSet up to date until signal aborts: it reads
 * the stream, and after the stream ends or fails it reconnects with the last
 * resume token (an expired one, OUT_OF_RANGE, starts again with a snapshot).
 */
export async function watchMachines(
  client: Client,
  signal: AbortSignal,
  onChange: (set: MachineSet, live: boolean, error?: unknown) => void,
): Promise<void> {
  let set = emptySet();
  let delay = 500;
  while (!signal.aborted) {
    // Without a token the server sends a snapshot first: collect it aside.
    let next: Map<string, Machine> | undefined = set.token ? undefined : new Map();
    try {
      await client.watchMachines(
        { resumeToken: set.token || undefined },
        (ev) => {
          set = apply(set, ev, next);
          if (ev.type === "EVENT_TYPE_SYNCED") next = undefined;
          delay = 500;
          onChange(set, true);
        },
        { signal },
      );
    } catch (e) {
      if (signal.aborted) return;
      if (e instanceof ApiError && e.code === Code.OutOfRange) {
        set = { ...set, token: "" };
        continue;
      }
      if (e instanceof ApiError && (e.httpStatus === 401 || e.forbidden)) {
        onChange(set, false, e);
        return;
      }
      onChange(set, false, e);
    }
    if (signal.aborted) return;
    onChange(set, false);
    await new Promise((r) => setTimeout(r, delay));
    delay = Math.min(delay * 2, 10_000);
  }
}
