import { useEffect, useState } from "preact/hooks";
import type { Client, Cluster, PreviewIchorUpgradeResponse, StartIchorUpgradeRequest } from "../api/generated";
import { Alert } from "../components/ui/alert";
import { Button } from "../components/ui/button";
import { Card, CardContent, CardHeader, CardTitle } from "../components/ui/card";
import { Dialog } from "../components/ui/dialog";
import { Checkbox, Field, Input } from "../components/ui/input";
import { ErrorAlert } from "../components/errors";
import { Loading } from "../components/loading";
import { RefusalList } from "../components/refusals";
import { navigate } from "../lib/router";
import * as api from "../api/v1alpha1";

/** normalizeVersion is the version as the server checks it: v prefixed, trimmed. */
export function normalizeVersion(v: string): string {
  const t = v.trim();
  return t && !t.startsWith("v") ? `v${t}` : t;
}

/** managerText says who upgrades Ichor, from spec.deployment.manager. */
function managerText(manager: string | undefined): string {
  switch (manager) {
    case api.ManagerHelm:
      return "Helm (`helm upgrade` upgrades it)";
    case api.ManagerIchor:
      return "its installer";
    default:
      return "not known";
  }
}

/**
 * VersionsCard is the overview's Versions card: what the cluster runs
 * (Talos, Kubernetes, the configuration contract), the Ichor its installer
 * last installed and who manages it (GetCluster), the Ichor serving this
 * page, and the Upgrade Ichor action (`ichor upgrade ichor`), which needs
 * `create` on talosoperations; the backend and the webhook check it and
 * the upgrade's rules again.
 */
export function VersionsCard({ client, cluster, canWrite }: { client: Client; cluster: Cluster | null; canWrite: boolean }) {
  const [open, setOpen] = useState(false);
  const installed = cluster?.ichorInstalledVersion ?? "";
  return (
    <Card aria-labelledby="versions-title">
      <CardHeader class="flex-row flex-wrap items-center justify-between">
        <CardTitle id="versions-title">Versions</CardTitle>
        {canWrite && !!cluster?.name && (
          <Button size="sm" variant="outline" onClick={() => setOpen(true)} data-testid="ichor-upgrade-open">
            Upgrade Ichor…
          </Button>
        )}
      </CardHeader>
      <CardContent>
        <dl class="grid grid-cols-1 gap-x-6 gap-y-2 text-sm sm:grid-cols-2 lg:grid-cols-4" data-testid="versions">
          <div class="flex min-w-0 flex-col">
            <dt class="text-xs text-muted-foreground">Talos</dt>
            <dd data-testid="version-talos">{cluster?.talosVersion || "—"}</dd>
          </div>
          <div class="flex min-w-0 flex-col">
            <dt class="text-xs text-muted-foreground">Kubernetes</dt>
            <dd>{cluster?.kubernetesVersion || "—"}</dd>
          </div>
          <div class="flex min-w-0 flex-col">
            <dt class="text-xs text-muted-foreground">Configuration contract</dt>
            <dd>{cluster?.versionContract || "—"}</dd>
          </div>
          <div class="flex min-w-0 flex-col">
            <dt class="text-xs text-muted-foreground">Ichor</dt>
            <dd data-testid="ichor-installed">{installed || "—"}</dd>
            <dd class="text-xs text-muted-foreground" data-testid="ichor-manager">
              {cluster?.ichorManager ? `installed and upgraded by ${managerText(cluster.ichorManager)}` : "no IchorInstallation read"}
              {cluster?.ichorVersion && installed && cluster.ichorVersion !== installed ? ` · this console is served by ${cluster.ichorVersion}` : ""}
            </dd>
          </div>
        </dl>
      </CardContent>
      {open && cluster?.name && <IchorUpgradeDialog client={client} cluster={cluster.name} open={open} onClose={() => setOpen(false)} />}
    </Card>
  );
}

/**
 * IchorUpgradeDialog upgrades Ichor itself as `ichor upgrade ichor VERSION
 * [--installer-digest D] [--skip-signature-check]` does: the version typed is
 * checked by the server (PreviewIchorUpgrade: guard.CheckIchorUpgrade, then
 * `create` on talosoperations) and what refuses it is shown; the start
 * (StartIchorUpgrade), once the cluster's name is typed as the CLI asks for
 * it, creates the ichor operation as the signed-in user and opens its page.
 */
export function IchorUpgradeDialog({ client, cluster, open, onClose }: { client: Client; cluster: string; open: boolean; onClose: () => void }) {
  const [version, setVersion] = useState("");
  const [typed, setTyped] = useState("");
  const [digest, setDigest] = useState("");
  const [skip, setSkip] = useState(false);
  const [check, setCheck] = useState<PreviewIchorUpgradeResponse | null>(null);
  const [checkError, setCheckError] = useState<unknown>(null);
  const [busy, setBusy] = useState(false);
  const [error, setError] = useState<unknown>(null);

  // The server checks the version typed; without one it says what is installed.
  useEffect(() => {
    if (!open) return;
    let stop = false;
    const v = version.trim();
    const t = setTimeout(
      () => {
        client.previewIchorUpgrade(v ? { version: v } : {}).then(
          (p) => {
            if (stop) return;
            setCheck(p);
            setCheckError(null);
          },
          (e) => !stop && setCheckError(e),
        );
      },
      v ? 250 : 0,
    );
    return () => {
      stop = true;
      clearTimeout(t);
    };
  }, [open, client, version]);

  function close() {
    setTyped("");
    setError(null);
    onClose();
  }

  const wanted = normalizeVersion(version);
  const checked = !!wanted && check?.version === wanted;
  const allowed = checked && check?.allowed === true;
  const ready = allowed && typed.trim() === cluster && !busy;
  const installed = check?.installed || "the installed release";

  async function submit(e: Event) {
    e.preventDefault();
    if (!ready) return;
    setBusy(true);
    setError(null);
    try {
      const body: StartIchorUpgradeRequest = { version: wanted, confirmClusterName: typed.trim() };
      if (digest.trim()) body.installerDigest = digest.trim();
      if (skip) body.skipSignatureCheck = true;
      const res = await client.startIchorUpgrade({ body });
      close();
      if (res.operation?.name) navigate(`/operations/${encodeURIComponent(res.operation.name)}`);
    } catch (err) {
      setError(err);
    } finally {
      setBusy(false);
    }
  }

  return (
    <Dialog open={open} onClose={close} title="Upgrade Ichor">
      <form onSubmit={submit} class="flex flex-col gap-3 text-sm" data-testid="ichor-upgrade-dialog">
        <ul class="list-disc space-y-1 pl-5 text-muted-foreground" data-testid="ichor-upgrade-explain">
          <li>
            The controller runs the installer image of the version as a Job in Ichor's namespace: it applies Ichor's RBAC, the CRDs (never downgraded), the controller and
            ichor-ui, checks them, and rolls back to {installed} if a step fails.
          </li>
          <li>One minor at a time, never down. The controller and ichor-ui restart; the clusters' machines are not touched.</li>
        </ul>
        {check && (
          <p data-testid="ichor-upgrade-installed">
            Installed: <span class="font-mono">{check.installed || "not recorded yet"}</span>
            {check.manager && <span class="text-muted-foreground"> · managed by {managerText(check.manager)}</span>}
          </p>
        )}
        <Field id="ichor-upgrade-version" label="Version" hint="An Ichor release, for example v0.5.0; the server checks it as `ichor upgrade ichor VERSION` does.">
          <Input id="ichor-upgrade-version" value={version} onInput={(e) => setVersion(e.currentTarget.value)} autoComplete="off" spellcheck={false} placeholder="v0.5.0" />
        </Field>
        <Field id="ichor-upgrade-digest" label="Installer digest (optional)" hint="sha256:… from the release notes, to run that image instead of the one the version's tag names now.">
          <Input id="ichor-upgrade-digest" value={digest} onInput={(e) => setDigest(e.currentTarget.value)} autoComplete="off" spellcheck={false} placeholder="sha256:…" />
        </Field>
        <Checkbox id="ichor-upgrade-skip" label="Skip the installer image's signature check" checked={skip} onChange={(e) => setSkip(e.currentTarget.checked)} />
        {skip && (
          <Alert tone="warn" title="The installer image will run without its signature checked">
            <p data-testid="ichor-upgrade-skip-warning">
              Only for a build nobody signs. Nothing then proves the image is Ichor's release: it runs with the rights to install Ichor. This is recorded as a Warning Event with your name
              (spec.ichor.installerSignature: skip).
            </p>
          </Alert>
        )}
        <ErrorAlert error={checkError} what="Checking the Ichor upgrade" />
        <Loading when={!!wanted && !checked && !checkError} />
        {checked && <RefusalList refusals={check?.refusals ?? []} title={`Upgrading Ichor to ${wanted} is refused; nothing can be started`} testid="ichor-upgrade-refusals" />}
        {allowed && (
          <>
            <p data-testid="ichor-upgrade-checked">
              {check?.installed || "(not recorded)"} → {wanted}: the checks pass. The controller resolves the installer image to its digest and, unless skipped, verifies its signature before the Job runs it.
            </p>
            <Field id="ichor-upgrade-confirm" label={`Type ${cluster} to confirm`}>
              <Input id="ichor-upgrade-confirm" value={typed} onInput={(e) => setTyped(e.currentTarget.value)} autoComplete="off" spellcheck={false} />
            </Field>
          </>
        )}
        <ErrorAlert error={error} what={`Upgrading Ichor to ${wanted}`} />
        <div class="flex justify-end gap-2">
          <Button variant="outline" onClick={close}>
            Cancel
          </Button>
          <Button type="submit" disabled={!ready} data-testid="ichor-upgrade-start">
            {busy ? "Starting…" : wanted ? `Upgrade to ${wanted}` : "Upgrade"}
          </Button>
        </div>
      </form>
    </Dialog>
  );
}
