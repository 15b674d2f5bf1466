// Shared helpers of the screens' DOM tests (happy-dom): a root element per
// test, a console context over a test client, and the act() steps the tests
// repeat. Only tests import this file.
import { afterEach, beforeEach } from "vitest";
import { render, type ComponentChildren } from "preact";
import { act } from "preact/test-utils";
import type { Client } from "../api/generated";
import { ConsoleContext, type Console } from "../context";
import { connectionOf } from "../lib/connection";

/** useRoot gives each test of the file a fresh root element, unmounted after it. */
export function useRoot(): () => HTMLElement {
  let root: HTMLElement;
  beforeEach(() => {
    root = document.createElement("div");
    document.body.appendChild(root);
  });
  afterEach(() => {
    render(null, root);
    root.remove();
  });
  return () => root;
}

/** consoleOf is a live, synced console for user ichor:ada in groups over client c. */
export function consoleOf(c: Client, groups: string[], more: Partial<Console> = {}): Console {
  return {
    client: c,
    me: { username: "ichor:ada", groups },
    cluster: null,
    clusterError: null,
    refreshCluster: () => {},
    machines: [],
    synced: true,
    live: true,
    watchError: null,
    connection: connectionOf({ now: Date.now(), lastBeat: Date.now(), watchLive: true }),
    canWrite: true,
    ...more,
  };
}

/** settle lets the screen's promises and effects run. */
export async function settle() {
  for (let i = 0; i < 5; i++) {
    await act(async () => {
      await new Promise((r) => setTimeout(r, 0));
    });
  }
}

/**
 * settleUntil settles until done() holds, for work that takes real time
 * rather than a few turns of the event loop (a lazily imported chunk on a
 * busy machine); it fails after 10 s.
 */
export async function settleUntil(done: () => boolean, what: string) {
  const deadline = Date.now() + 10_000;
  await settle();
  while (!done()) {
    if (Date.now() > deadline) throw new Error(`still waiting after 10 s: ${what}`);
    await act(async () => {
      await new Promise((r) => setTimeout(r, 10));
    });
  }
}

/** show renders children in root under the console ctx and settles. */
export async function show(root: HTMLElement, ctx: Console, children: ComponentChildren) {
  await act(() => {
    render(<ConsoleContext.Provider value={ctx}>{children}</ConsoleContext.Provider>, root);
  });
  await settle();
}

/** type sets the value of the input sel matches in root and fires input. */
export async function type(root: HTMLElement, sel: string, value: string) {
  await act(() => {
    const el = root.querySelector<HTMLInputElement>(sel)!;
    el.value = value;
    el.dispatchEvent(new Event("input"));
  });
}

/** click clicks the element sel matches in root and settles. */
export async function click(root: HTMLElement, sel: string) {
  await act(() => root.querySelector<HTMLElement>(sel)!.click());
  await settle();
}
