import { useEffect, useState } from "preact/hooks";
import type { Client, PreviewTalosUpgradeResponse, StartTalosUpgradeResponse, VersionCandidate } from "../api/generated";
import { Dialog } from "../components/ui/dialog";
import { Button, LinkButton } from "../components/ui/button";
import { Field, Input } from "../components/ui/input";
import { Alert } from "../components/ui/alert";
import { Badge } from "../components/ui/badge";
import { ErrorAlert } from "../components/errors";
import * as api from "../api/v1alpha1";

/** The candidate groups, in the order the controller records them. */
const groups = [api.CandidateRecommended, api.CandidatePatch, api.CandidateNextMinor];

/** filterCandidates keeps the candidates whose version contains the search text. */
export function filterCandidates(cs: VersionCandidate[], search: string): VersionCandidate[] {
  const s = search.trim().replace(/^v/, "");
  return s ? cs.filter((c) => (c.version ?? "").includes(s)) : cs;
}

/**
 * TalosUpgradeDialog offers the Talos versions the controller found
 * (PreviewTalosUpgrade: grouped Recommended / Patch / Next minor, the default
 * chosen, searchable), checks the chosen or typed version on the server the
 * way `ichor upgrade talos VERSION` does and shows what refuses it, asks for
 * the cluster's name, and starts the upgrade (StartTalosUpgrade writes
 * spec.talosVersion; the controller starts the talos operation).
 */
export function TalosUpgradeDialog({ client, cluster, open, onClose }: { client: Client; cluster: string; open: boolean; onClose: () => void }) {
  const [preview, setPreview] = useState<PreviewTalosUpgradeResponse | null>(null);
  const [previewError, setPreviewError] = useState<unknown>(null);
  const [search, setSearch] = useState("");
  const [version, setVersion] = useState("");
  const [check, setCheck] = useState<PreviewTalosUpgradeResponse | null>(null);
  const [typed, setTyped] = useState("");
  const [busy, setBusy] = useState(false);
  const [error, setError] = useState<unknown>(null);
  const [started, setStarted] = useState<StartTalosUpgradeResponse | null>(null);

  useEffect(() => {
    if (!open) return;
    let stop = false;
    setPreview(null);
    setPreviewError(null);
    client.previewTalosUpgrade({}).then(
      (p) => {
        if (stop) return;
        setPreview(p);
        const def = (p.candidates ?? []).find((c) => c.default);
        if (def?.version) setVersion(def.version);
      },
      (e) => !stop && setPreviewError(e),
    );
    return () => {
      stop = true;
    };
  }, [open, client]);

  // The server checks the version chosen or typed (a typed one not in the list too).
  useEffect(() => {
    if (!open || !version.trim()) {
      setCheck(null);
      return;
    }
    let stop = false;
    const t = setTimeout(() => {
      client.previewTalosUpgrade({ version: version.trim() }).then(
        (p) => !stop && setCheck(p),
        (e) => !stop && setPreviewError(e),
      );
    }, 250);
    return () => {
      stop = true;
      clearTimeout(t);
    };
  }, [open, client, version]);

  function close() {
    setTyped("");
    setSearch("");
    setError(null);
    setStarted(null);
    setCheck(null);
    onClose();
  }

  const name = preview?.cluster || cluster;
  const candidates = filterCandidates(preview?.candidates ?? [], search);
  const refusals = check?.refusals ?? [];
  const checked = !!check && check.version === (version.trim().startsWith("v") ? version.trim() : `v${version.trim()}`);
  const ready = checked && refusals.length === 0 && !preview?.unfinished;

  async function submit(e: Event) {
    e.preventDefault();
    if (!ready || typed.trim() !== name) return;
    setBusy(true);
    setError(null);
    try {
      setStarted(await client.startTalosUpgrade({ body: { version: version.trim(), confirmClusterName: typed.trim() } }));
    } catch (err) {
      setError(err);
    } finally {
      setBusy(false);
    }
  }

  return (
    <Dialog
      open={open}
      onClose={close}
      title={`Upgrade Talos on ${name}`}
      description={<>Every machine is drained, upgraded and rebooted: control planes first, one at a time, then the workers. A failed step pauses the operation.</>}
    >
      {started ? (
        <div class="flex flex-col gap-3" data-testid="talos-upgrade-started">
          <Alert title={`Upgrading from ${started.from} to ${started.to}`}>The controller starts a talos operation; follow it on Operations.</Alert>
          <div class="flex justify-end gap-2">
            <Button variant="outline" onClick={close}>
              Close
            </Button>
            <LinkButton variant="default" href="/operations">
              Open Operations
            </LinkButton>
          </div>
        </div>
      ) : (
        <form onSubmit={submit} class="flex flex-col gap-3">
          <ErrorAlert error={previewError} what="Reading the upgrade candidates" />
          {!preview && !previewError && (
            <p class="text-sm text-muted-foreground" role="status">
              Reading the candidates…
            </p>
          )}
          {preview && (
            <p class="text-sm">
              Running <span class="font-mono">{preview.current}</span>
              {preview.source && <span class="text-muted-foreground"> · candidates from {preview.source}</span>}
            </p>
          )}
          {preview?.sourceMessage && (
            <Alert tone="warn" title="The release source could not be read">
              {preview.sourceMessage}
            </Alert>
          )}
          {preview?.unfinished && (
            <Alert tone="warn" title={`Talos operation ${preview.unfinished.name} has not finished (${preview.unfinished.phase || api.OperationPending})`}>
              Let it finish or resume it first:{" "}
              <a class="underline" href={`/operations/${encodeURIComponent(preview.unfinished.name ?? "")}`}>
                open {preview.unfinished.name}
              </a>
              .
            </Alert>
          )}
          {preview && (
            <Field id="talos-upgrade-search" label="Search the candidates">
              <Input id="talos-upgrade-search" value={search} onInput={(e) => setSearch(e.currentTarget.value)} autoComplete="off" spellcheck={false} placeholder="1.14" />
            </Field>
          )}
          {preview && (
            <div class="max-h-60 overflow-y-auto text-sm" data-testid="talos-upgrade-candidates" role="radiogroup" aria-label="Talos versions">
              {candidates.length === 0 && <p class="text-muted-foreground">No candidate {search ? "matches" : "is offered"}; type a version below.</p>}
              {groups.map((g) => {
                const inGroup = candidates.filter((c) => c.group === g);
                if (!inGroup.length) return null;
                return (
                  <fieldset key={g} class="mb-2" data-group={g}>
                    <legend class="text-xs font-semibold text-muted-foreground">{g}</legend>
                    {inGroup.map((c) => (
                      <label key={c.version} class="flex items-center gap-2 py-0.5">
                        <input type="radio" name="talos-version" value={c.version} checked={version === c.version} onChange={() => setVersion(c.version ?? "")} />
                        <span class="font-mono">{c.version}</span>
                        {c.default && <Badge tone="ok">default</Badge>}
                      </label>
                    ))}
                  </fieldset>
                );
              })}
            </div>
          )}
          {preview && (
            <Field id="talos-upgrade-version" label="Version" hint="A version not in the list can be typed; the server checks it the same way.">
              <Input id="talos-upgrade-version" value={version} onInput={(e) => setVersion(e.currentTarget.value)} autoComplete="off" spellcheck={false} />
            </Field>
          )}
          {checked && refusals.length > 0 && (
            <Alert tone="error" title={`Talos ${check?.version} is refused`}>
              <ul class="list-disc pl-5" data-testid="talos-upgrade-refusals">
                {refusals.map((r, i) => (
                  <li key={i}>
                    {r.rule}. {r.wayOut}
                  </li>
                ))}
              </ul>
            </Alert>
          )}
          {checked && refusals.length === 0 && (
            <p class="text-sm" data-testid="talos-upgrade-checked">
              {preview?.current} → {check?.version}: the upgrade path and the Kubernetes pairing are supported. The operation checks etcd and every node again before it starts.
            </p>
          )}
          {ready && (
            <Field id="talos-upgrade-confirm" label={`Type ${name} to confirm`}>
              <Input id="talos-upgrade-confirm" value={typed} onInput={(e) => setTyped(e.currentTarget.value)} autoComplete="off" spellcheck={false} />
            </Field>
          )}
          <ErrorAlert error={error} what="Starting the upgrade" />
          <div class="flex justify-end gap-2">
            <Button variant="outline" onClick={close}>
              Cancel
            </Button>
            <Button type="submit" disabled={!ready || typed.trim() !== name || busy} data-testid="talos-upgrade-start">
              {busy ? "Starting…" : "Upgrade"}
            </Button>
          </div>
        </form>
      )}
    </Dialog>
  );
}
