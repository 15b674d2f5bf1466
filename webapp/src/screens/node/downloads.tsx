import { useState } from "preact/hooks";
import type { Machine } from "../../api/generated";
import { Button } from "../../components/ui/button";
import { Card, CardContent, CardHeader, CardTitle } from "../../components/ui/card";
import { Field, Input, Select } from "../../components/ui/input";
import { ErrorAlert } from "../../components/errors";
import { captureLimits, captureProblem, captureQuery, saveFile, talosconfigHours, type DownloadKind, type Downloader } from "../../lib/download";
import { isControlPlane } from "../../lib/node";

/** offersDownloads reports whether the console offers a node's downloads: an admin, a running node (ichor-ui checks the verb again). */
export function offersDownloads(m: Machine, admin: boolean, download: Downloader | undefined): boolean {
  return admin && !!download && m.stage === "running" && !!m.address;
}

/** useDownload runs one download at a time and keeps its error. */
export function useDownload(download: Downloader) {
  const [busy, setBusy] = useState<DownloadKind | "">("");
  const [error, setError] = useState<unknown>(null);
  const [done, setDone] = useState("");
  const run = async (kind: DownloadKind, node: string, query?: Record<string, string>) => {
    setBusy(kind);
    setError(null);
    setDone("");
    try {
      const d = await download(kind, node, query);
      saveFile(d);
      setDone(d.filename);
    } catch (e) {
      setError(e);
    } finally {
      setBusy("");
    }
  };
  return { busy, error, done, run };
}

/**
 * NodeDownloads is the node page's admin downloads: a support bundle, a
 * packet capture of one link for a bounded time and, on a control plane, an
 * etcd snapshot. Each leaves a Warning Event with the user's name on the
 * TalosMachine before a byte flows; ichor-ui holds the Talos certificate.
 */
export function NodeDownloads({ m, download }: { m: Machine; download: Downloader }) {
  const name = m.name ?? "";
  const dl = useDownload(download);
  const [iface, setIface] = useState("");
  const [seconds, setSeconds] = useState(String(captureLimits.defaultSeconds));
  const form = { iface, seconds: Number(seconds) };
  const problem = iface || seconds !== String(captureLimits.defaultSeconds) ? captureProblem(form) : "";
  return (
    <Card data-testid="node-downloads">
      <CardHeader>
        <CardTitle>Admin downloads</CardTitle>
      </CardHeader>
      <CardContent class="flex flex-col gap-3">
        <p class="text-sm text-muted-foreground">Each download is recorded as a Warning Event with your name on this machine. ichor-ui calls the node with a ten-minute certificate it keeps; your browser gets only the file.</p>
        <div class="flex flex-wrap gap-2">
          <Button variant="outline" disabled={!!dl.busy} onClick={() => void dl.run("support-bundle", name)} data-testid="download-support-bundle">
            {dl.busy === "support-bundle" ? "Collecting…" : "Download support bundle"}
          </Button>
          {isControlPlane(m) && (
            <Button variant="outline" disabled={!!dl.busy} onClick={() => void dl.run("etcd-snapshot", name)} data-testid="download-etcd-snapshot">
              {dl.busy === "etcd-snapshot" ? "Downloading…" : "Download etcd snapshot"}
            </Button>
          )}
        </div>
        <form
          class="flex flex-wrap items-end gap-2"
          onSubmit={(e) => {
            e.preventDefault();
            if (!captureProblem(form)) void dl.run("packet-capture", name, captureQuery(form));
          }}
        >
          <Field id="capture-interface" label="Interface" class="w-40">
            <Input id="capture-interface" value={iface} placeholder="eth0" onInput={(e) => setIface(e.currentTarget.value)} data-testid="capture-interface" />
          </Field>
          <Field id="capture-seconds" label="Seconds" class="w-28">
            <Input id="capture-seconds" type="number" min={captureLimits.minSeconds} max={captureLimits.maxSeconds} value={seconds} onInput={(e) => setSeconds(e.currentTarget.value)} data-testid="capture-seconds" />
          </Field>
          <Button type="submit" variant="outline" disabled={!!dl.busy || !!captureProblem(form)} data-testid="download-packet-capture">
            {dl.busy === "packet-capture" ? "Capturing…" : "Capture packets"}
          </Button>
        </form>
        {problem && (
          <p class="text-xs font-medium text-destructive-foreground" data-testid="capture-problem">
            {problem}
          </p>
        )}
        <DownloadOutcome error={dl.error} done={dl.done} />
      </CardContent>
    </Card>
  );
}

/** snapshotSource is the control plane an etcd snapshot is downloaded from: the first running one, by name. */
export function snapshotSource(machines: Machine[]): Machine | undefined {
  return machines
    .filter((m) => isControlPlane(m) && m.stage === "running" && !!m.address)
    .sort((a, b) => (a.name ?? "").localeCompare(b.name ?? ""))[0];
}

/** EtcdSnapshotDownload is the Backups page's download of a snapshot of the live etcd, for admins. */
export function EtcdSnapshotDownload({ machines, download }: { machines: Machine[]; download: Downloader }) {
  const dl = useDownload(download);
  const source = snapshotSource(machines);
  return (
    <Card data-testid="etcd-snapshot-download">
      <CardHeader>
        <CardTitle>Snapshot of the live etcd</CardTitle>
      </CardHeader>
      <CardContent class="flex flex-col gap-3">
        <p class="text-sm text-muted-foreground">
          {source
            ? `Downloads a snapshot from control plane ${source.name}, recorded as a Warning Event with your name. It is not encrypted: keep it as safely as the cluster's secrets.`
            : "No control plane is running: a snapshot can be downloaded once one runs."}
        </p>
        <div>
          <Button variant="outline" disabled={!source || !!dl.busy} onClick={() => source && void dl.run("etcd-snapshot", source.name ?? "")} data-testid="download-etcd-snapshot">
            {dl.busy ? "Downloading…" : "Download etcd snapshot"}
          </Button>
        </div>
        <DownloadOutcome error={dl.error} done={dl.done} />
      </CardContent>
    </Card>
  );
}

/** DownloadOutcome says how the last download ended: the backend's refusal, or the file saved. */
function DownloadOutcome({ error, done }: { error: unknown; done?: string }) {
  return (
    <>
      <ErrorAlert error={error} what="The download" />
      {done && (
        <p class="text-sm" role="status" data-testid="download-done">
          Saved {done}.
        </p>
      )}
    </>
  );
}

/**
 * TalosconfigDownload is the overview's read-only talosconfig: an os:reader
 * certificate of the running control planes for a chosen number of hours,
 * recorded as a Warning Event with the user's name on the TalosCluster;
 * `ichor cluster talosconfig` writes the same file.
 */
export function TalosconfigDownload({ download }: { download: Downloader }) {
  const dl = useDownload(download);
  const [hours, setHours] = useState<number>(talosconfigHours[0]);
  return (
    <Card data-testid="talosconfig-download">
      <CardHeader>
        <CardTitle>Read-only talosconfig</CardTitle>
      </CardHeader>
      <CardContent class="flex flex-col gap-3">
        <p class="text-sm text-muted-foreground">
          A talosconfig for talosctl that reads the nodes (versions, services, logs, resources) and can change nothing. It is recorded as a Warning Event with your name; the file holds its key, so keep it as you would a password until it expires.
        </p>
        <div class="flex flex-wrap items-end gap-2">
          <Field id="talosconfig-hours" label="Valid for" class="w-36">
            <Select
              id="talosconfig-hours"
              value={String(hours)}
              onChange={(e) => setHours(Number(e.currentTarget.value))}
              data-testid="talosconfig-hours"
            >
              {talosconfigHours.map((h) => (
                <option key={h} value={String(h)}>
                  {h === 1 ? "1 hour" : `${h} hours`}
                </option>
              ))}
            </Select>
          </Field>
          <Button variant="outline" disabled={!!dl.busy} onClick={() => void dl.run("talosconfig", "", { duration: `${hours}h` })} data-testid="download-talosconfig">
            {dl.busy ? "Signing…" : "Download talosconfig"}
          </Button>
        </div>
        <DownloadOutcome error={dl.error} done={dl.done} />
      </CardContent>
    </Card>
  );
}
