// @vitest-environment happy-dom
import { afterEach, beforeEach, describe, expect, it } from "vitest";
import { render } from "preact";
import { act } from "preact/test-utils";
import type { Client, Operation, OperationServiceResumeOperationBody } from "../api/generated";
import { ConsoleContext, type Console } from "../context";
import { connectionOf } from "../lib/connection";
import { PauseResume, overrideEffect } from "./operations";

/** A client that records the resume calls and answers with the operation. */
function client() {
  const calls: { name: string; body: OperationServiceResumeOperationBody }[] = [];
  const c = {
    resumeOperation: ({ name, body }: { name: string; body: OperationServiceResumeOperationBody }) => {
      calls.push({ name, body });
      return Promise.resolve({ operation: {} });
    },
  };
  return { c: c as unknown as Client, calls };
}

const capacity: Operation = {
  name: "reboot-cp-2", type: "node", phase: "Paused", failureReason: "step drain of machine cp-2 failed: a cluster of three control planes and no worker is checked before each drain", overridable: true,
};

let root: HTMLElement;
beforeEach(() => {
  root = document.createElement("div");
  document.body.appendChild(root);
});
afterEach(() => {
  render(null, root);
  root.remove();
});

async function settle() {
  for (let i = 0; i < 5; i++) {
    await act(async () => {
      await new Promise((r) => setTimeout(r, 0));
    });
  }
}

function consoleOf(c: Client): Console {
  return {
    client: c,
    me: { username: "olivia", groups: ["ichor:admin"] },
    cluster: { name: "prod" },
    clusterError: null,
    refreshCluster: () => {},
    machines: [],
    synced: true,
    live: true,
    watchError: null,
    connection: connectionOf({ now: Date.now(), lastBeat: Date.now(), watchLive: true }),
    canWrite: true,
  };
}

async function show(c: Client, op: Operation, done: { n: number }) {
  await act(() => {
    render(
      <ConsoleContext.Provider value={consoleOf(c)}>
        <PauseResume op={op} onDone={() => done.n++} />
      </ConsoleContext.Provider>,
      root,
    );
  });
  await settle();
}

async function click(sel: string) {
  const b = root.querySelector<HTMLButtonElement>(sel);
  expect(b, sel).not.toBeNull();
  await act(() => {
    b!.click();
  });
  await settle();
}

describe("Retry with override", () => {
  it("asks first, says what it goes past, then resumes with override", async () => {
    const { c, calls } = client();
    const done = { n: 0 };
    await show(c, capacity, done);
    await click("[data-testid=override-open-reboot-cp-2]");
    expect(calls).toEqual([]);
    expect(root.textContent).toContain("they stay Pending until it is back");
    expect(root.textContent).toContain("needs the override verb on the cluster");
    await click("[data-testid=override-reboot-cp-2]");
    expect(calls).toEqual([{ name: "reboot-cp-2", body: { override: true } }]);
    expect(done.n).toBe(1);
  });

  it("retries the step without override from its own button", async () => {
    const { c, calls } = client();
    await show(c, capacity, { n: 0 });
    await click("[data-testid=resume-reboot-cp-2]");
    expect(calls).toEqual([{ name: "reboot-cp-2", body: {} }]);
  });

  it("is not offered when the failed step is not overridable", async () => {
    const { c } = client();
    await show(c, { ...capacity, overridable: false }, { n: 0 });
    expect(root.querySelector("[data-testid=resume-reboot-cp-2]")).not.toBeNull();
    expect(root.querySelector("[data-testid=override-open-reboot-cp-2]")).toBeNull();
  });

  it("names the removed APIs for a kubernetes operation", () => {
    expect(overrideEffect({ ...capacity, type: "kubernetes" })).toContain("APIs the target removes are in use");
  });
});
