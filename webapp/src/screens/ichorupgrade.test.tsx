// @vitest-environment happy-dom
import { beforeEach, describe, expect, it } from "vitest";
import { act } from "preact/test-utils";
import type { Client, Cluster, PreviewIchorUpgradeResponse, Refusal, StartIchorUpgradeRequest } from "../api/generated";
import { click, consoleOf, settle, settleUntil, show, type, useRoot } from "../testing/dom";
import * as api from "../api/v1alpha1";
import { VersionsCard } from "./ichorupgrade";

const cluster: Cluster = {
  name: "prod",
  talosVersion: "v1.14.1",
  kubernetesVersion: "1.37.2",
  versionContract: "v1.14",
  ichorVersion: "v0.4.0",
  ichorInstalledVersion: "v0.4.0",
  ichorManager: api.ManagerIchor,
};

const downgrade: Refusal = {
  field: "spec.ichor.version",
  rule: "v0.3.9 is older than the installed Ichor v0.4.0: the installer never downgrades (a release's CRDs are not taken back); nothing was created",
  wayOut: "choose v0.4.0 or a newer release (`ichor version` shows the installed one); a failed upgrade rolls itself back",
};

/**
 * A client whose preview refuses v0.3.9 (a downgrade) as the backend does
 * and allows anything else; it records the versions checked and the starts.
 */
function client() {
  const checks: (string | undefined)[] = [];
  const starts: StartIchorUpgradeRequest[] = [];
  const c = {
    previewIchorUpgrade: (args?: { version?: string }) => {
      checks.push(args?.version);
      const v = args?.version?.trim() ?? "";
      const version = v && !v.startsWith("v") ? `v${v}` : v;
      const refusals = version === "v0.3.9" ? [downgrade] : [];
      const p: PreviewIchorUpgradeResponse = {
        cluster: "prod",
        installation: true,
        installed: "v0.4.0",
        manager: api.ManagerIchor,
        version,
        refusals,
        allowed: !!version && refusals.length === 0,
      };
      return Promise.resolve(p);
    },
    startIchorUpgrade: ({ body }: { body: StartIchorUpgradeRequest }) => {
      starts.push(body);
      return Promise.resolve({ operation: { name: "ichor-v0-5-0-x7k2p", type: api.OperationIchor } });
    },
  };
  return { c: c as unknown as Client, checks, starts };
}

describe("The Versions card's Ichor upgrade", () => {
  const root = useRoot();
  const q = <T extends Element = HTMLElement>(sel: string) => root().querySelector<T>(sel);
  const startButton = () => q<HTMLButtonElement>("[data-testid=ichor-upgrade-start]")!;
  beforeEach(() => history.replaceState(null, "", "/"));

  async function openDialog(c: Client, canWrite = true) {
    await show(root(), consoleOf(c, ["ichor:admin"]), <VersionsCard client={c} cluster={cluster} canWrite={canWrite} />);
    await click(root(), "[data-testid=ichor-upgrade-open]");
  }

  async function submit() {
    await act(() => {
      q("[data-testid=ichor-upgrade-dialog]")!.dispatchEvent(new Event("submit", { bubbles: true, cancelable: true }));
    });
    await settle();
  }

  it("shows the installed Ichor and who manages it, and offers the upgrade only to a writer", async () => {
    const { c } = client();
    await show(root(), consoleOf(c, ["ichor:viewer"]), <VersionsCard client={c} cluster={cluster} canWrite={false} />);
    expect(q("#versions-title")?.textContent).toBe("Versions");
    expect(q("[data-testid=version-talos]")?.textContent).toBe("v1.14.1");
    expect(q("[data-testid=ichor-installed]")?.textContent).toBe("v0.4.0");
    expect(q("[data-testid=ichor-manager]")?.textContent).toContain("installed and upgraded by its installer");
    expect(q("[data-testid=ichor-upgrade-open]")).toBeNull();
    await show(root(), consoleOf(c, ["ichor:viewer"]), <VersionsCard client={c} cluster={{ ...cluster, ichorManager: api.ManagerHelm }} canWrite={true} />);
    expect(q("[data-testid=ichor-manager]")?.textContent).toContain("`helm upgrade`");
    expect(q("[data-testid=ichor-upgrade-open]")).not.toBeNull();
  });

  it("shows the backend's refusal of a downgrade and does not start", async () => {
    const { c, checks, starts } = client();
    await openDialog(c);
    await settleUntil(() => !!q("[data-testid=ichor-upgrade-installed]"), "the installed version in the dialog");
    expect(q("[data-testid=ichor-upgrade-installed]")?.textContent).toContain("v0.4.0");
    await type(root(), "#ichor-upgrade-version", "0.3.9");
    await settleUntil(() => !!q("[data-testid=ichor-upgrade-refusals]"), "the refusal of v0.3.9");
    expect(checks).toContain("0.3.9");
    const refusals = q("[data-testid=ichor-upgrade-refusals]")?.textContent ?? "";
    expect(refusals).toContain("v0.3.9 is older than the installed Ichor v0.4.0");
    expect(refusals).toContain("choose v0.4.0 or a newer release");
    expect(startButton().disabled).toBe(true);
    await submit();
    expect(starts).toEqual([]);
    expect(location.pathname).toBe("/");
  });

  it("warns when the signature check is skipped, sends the request the CLI's flags make, and opens the operation", async () => {
    const { c, starts } = client();
    await openDialog(c);
    await type(root(), "#ichor-upgrade-version", "0.5.0");
    await type(root(), "#ichor-upgrade-digest", `sha256:${"0a".repeat(32)}`);
    expect(q("[data-testid=ichor-upgrade-skip-warning]")).toBeNull();
    await act(() => q<HTMLInputElement>("#ichor-upgrade-skip")!.click());
    await settleUntil(() => !!q("[data-testid=ichor-upgrade-checked]"), "the check of v0.5.0");
    expect(q("[data-testid=ichor-upgrade-skip-warning]")?.textContent).toContain("Warning Event with your name");
    expect(q("[data-testid=ichor-upgrade-refusals]")).toBeNull();
    // The checks pass; the cluster's name is still to be typed, as the CLI asks for it.
    expect(startButton().disabled).toBe(true);
    await submit();
    expect(starts).toEqual([]);
    await type(root(), "#ichor-upgrade-confirm", "pro");
    expect(startButton().disabled).toBe(true);
    await type(root(), "#ichor-upgrade-confirm", "prod");
    expect(startButton().disabled).toBe(false);
    expect(startButton().textContent).toBe("Upgrade to v0.5.0");
    await submit();
    await settleUntil(() => location.pathname !== "/", "the operation's page");
    expect(starts).toEqual([
      { version: "v0.5.0", confirmClusterName: "prod", installerDigest: `sha256:${"0a".repeat(32)}`, skipSignatureCheck: true } satisfies StartIchorUpgradeRequest,
    ]);
    expect(location.pathname).toBe("/operations/ichor-v0-5-0-x7k2p");
  });

  it("leaves the digest and the skip out when they are not asked for", async () => {
    const { c, starts } = client();
    await openDialog(c);
    await type(root(), "#ichor-upgrade-version", "v0.5.0");
    await settleUntil(() => !!q("#ichor-upgrade-confirm"), "the checks pass");
    await type(root(), "#ichor-upgrade-confirm", "prod");
    await settleUntil(() => !startButton().disabled, "the start allowed");
    await submit();
    await settleUntil(() => starts.length > 0, "the start");
    expect(starts).toEqual([{ version: "v0.5.0", confirmClusterName: "prod" }]);
  });
});
