// @vitest-environment happy-dom
import { afterEach, beforeEach, describe, expect, it } from "vitest";
import { render } from "preact";
import { act } from "preact/test-utils";
import type { Client, Cluster, PreviewClusterShutdownResponse, StartClusterShutdownRequest } from "../api/generated";
import { ConsoleContext, type Console } from "../context";
import { connectionOf } from "../lib/connection";
import { ShutdownControl, ShutdownDialog } from "./shutdown";

const plan: PreviewClusterShutdownResponse = {
  cluster: "prod",
  controlPlanes: 3,
  workers: 2,
  allowed: true,
  steps: ["power every worker off at once", "power every control plane off in one burst, the controller's own node last"],
};

function client(p: PreviewClusterShutdownResponse) {
  const starts: StartClusterShutdownRequest[] = [];
  const c = {
    previewClusterShutdown: () => Promise.resolve(p),
    startClusterShutdown: ({ body }: { body: StartClusterShutdownRequest }) => {
      starts.push(body);
      return Promise.resolve({ operation: { name: "shutdown-x7k2p" } });
    },
  };
  return { c: c as unknown as Client, starts };
}

let root: HTMLElement;
beforeEach(() => {
  root = document.createElement("div");
  document.body.appendChild(root);
  history.replaceState(null, "", "/");
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

function q<T extends Element = HTMLElement>(sel: string): T | null {
  return root.querySelector<T>(sel);
}

async function show(c: Client) {
  await act(() => {
    render(<ShutdownDialog client={c} cluster="prod" open={true} onClose={() => {}} />, root);
  });
  await settle();
}

describe("ShutdownDialog", () => {
  it("says what goes off, asks for the cluster's name, starts, and opens the operation", async () => {
    const { c, starts } = client(plan);
    await show(c);
    expect(q("[data-testid=shutdown-machines]")?.textContent).toBe("2 workers and 3 control planes go off.");
    expect(q("[data-testid=shutdown-steps]")?.textContent).toContain("the controller's own node last");
    const start = () => q<HTMLButtonElement>("[data-testid=shutdown-start]")!;
    expect(start().disabled).toBe(true);
    const input = q<HTMLInputElement>("#shutdown-confirm")!;
    await act(() => {
      input.value = "prod";
      input.dispatchEvent(new Event("input", { bubbles: true }));
    });
    expect(start().disabled).toBe(false);
    await act(() => {
      q<HTMLFormElement>("form")!.dispatchEvent(new Event("submit", { bubbles: true, cancelable: true }));
    });
    await settle();
    expect(starts).toEqual([{ confirmClusterName: "prod" }]);
    expect(location.pathname).toBe("/operations/shutdown-x7k2p");
  });

  it("names the shutdown that has not completed, shows the refusal, and offers no start", async () => {
    const { c, starts } = client({
      ...plan,
      allowed: false,
      unfinished: { name: "shutdown-old", phase: "Running" },
      refusals: [{ field: "spec.type", rule: "cluster prod is being shut down by operation shutdown-old", wayOut: "power the machines on" }],
    });
    await show(c);
    expect(root.textContent).toContain("Shutdown shutdown-old has not completed (Running)");
    expect(q("[data-testid=shutdown-refusals]")?.textContent).toContain("being shut down by operation shutdown-old");
    expect(q("#shutdown-confirm")).toBeNull();
    expect(q<HTMLButtonElement>("[data-testid=shutdown-start]")!.disabled).toBe(true);
    expect(starts).toEqual([]);
  });
});

describe("ShutdownControl", () => {
  function consoleOf(canWrite: boolean): Console {
    const cluster: Cluster = { name: "prod" };
    return {
      client: client(plan).c,
      me: { username: "ada", groups: [canWrite ? "ichor:admin" : "ichor:viewer"] },
      cluster,
      clusterError: null,
      refreshCluster: () => {},
      machines: [],
      synced: true,
      live: true,
      watchError: null,
      connection: connectionOf({ now: Date.now(), lastBeat: Date.now(), watchLive: true }),
      canWrite,
    };
  }

  it("is a red header action for writers and nothing for viewers", async () => {
    await act(() => {
      render(
        <ConsoleContext.Provider value={consoleOf(true)}>
          <ShutdownControl />
        </ConsoleContext.Provider>,
        root,
      );
    });
    const b = q<HTMLButtonElement>("[data-testid=shutdown-open]")!;
    expect(b.textContent).toBe("Shut down…");
    expect(b.className).toContain("bg-destructive");
    await act(() => {
      render(
        <ConsoleContext.Provider value={consoleOf(false)}>
          <ShutdownControl />
        </ConsoleContext.Provider>,
        root,
      );
    });
    expect(q("button")).toBeNull();
  });
});
