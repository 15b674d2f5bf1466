import { useEffect, useRef, useState } from "preact/hooks";
import { useConsole } from "../context";
import type { Client, GetEffectiveConfigResponse, Machine, PreviewRemovalResponse } from "../api/generated";
import { bytes, stableKey, stableLabel } from "../lib/disks";
import { navigate } from "../lib/router";
import { timeAgo } from "../lib/status";
import { Card, CardContent, CardHeader, CardTitle } from "../components/ui/card";
import { Tabs } from "../components/ui/tabs";
import { Badge } from "../components/ui/badge";
import { Button } from "../components/ui/button";
import { Checkbox, Field, Input, Select } from "../components/ui/input";
import { Dialog } from "../components/ui/dialog";
import { Alert } from "../components/ui/alert";
import { Table, TBody, TD, TH, THead, TR } from "../components/ui/table";
import { ErrorAlert } from "../components/errors";
import { StateBadge } from "../components/state";
import { Detail } from "./overview";
import * as api from "../api/v1alpha1";

const tabs = [
  { id: "summary", label: "Summary" },
  { id: "storage", label: "Storage & network" },
  { id: "talos", label: "Talos" },
  { id: "kubernetes", label: "Kubernetes & etcd" },
  { id: "config", label: "Configuration" },
];

/** useCall loads a read once per key, and keeps its error. */
function useCall<T>(key: string, fn: () => Promise<T>): { data: T | null; error: unknown; loading: boolean } {
  const [state, setState] = useState<{ data: T | null; error: unknown; loading: boolean }>({ data: null, error: null, loading: true });
  useEffect(() => {
    let stop = false;
    setState({ data: null, error: null, loading: true });
    fn().then(
      (data) => !stop && setState({ data, error: null, loading: false }),
      (error) => !stop && setState({ data: null, error, loading: false }),
    );
    return () => {
      stop = true;
    };
  }, [key]);
  return state;
}

function Loading({ when }: { when: boolean }) {
  return when ? (
    <p role="status" data-loading="" class="text-sm text-muted-foreground">
      Loading…
    </p>
  ) : null;
}

/** RemovalPreview shows what the removal would do: the backend's shared plan (steps, effects) and the guard's refusals. */
function RemovalPreview({ preview, loading, error, name }: { preview: PreviewRemovalResponse | null; loading: boolean; error: unknown; name: string }) {
  if (error) return <ErrorAlert error={error} what={`Previewing the removal of ${name}`} />;
  if (!preview) return <Loading when={loading} />;
  const refusals = preview.refusals ?? [];
  return (
    <div class="flex flex-col gap-3 text-sm" data-testid="removal-preview" data-allowed={preview.allowed ? "true" : "false"} aria-busy={loading}>
      {refusals.length > 0 && (
        <Alert tone="error" title="The checks refuse this removal now">
          <ul class="list-disc space-y-1 pl-5" data-testid="removal-refusals">
            {refusals.map((r, i) => (
              <li key={i}>
                <span class="font-medium">{r.rule}</span>
                {r.field && <span class="text-muted-foreground"> ({r.field})</span>}
                {r.wayOut && <div>What to do: {r.wayOut}</div>}
                {r.overridable && <div class="text-xs text-muted-foreground">An admin with the override verb can let this through with kubectl.</div>}
              </li>
            ))}
          </ul>
        </Alert>
      )}
      <div>
        <p class="font-semibold">Effects</p>
        <ul class="mt-1 list-disc space-y-1 pl-5" data-testid="removal-effects">
          {(preview.effects ?? []).map((e, i) => (
            <li key={i}>{e}</li>
          ))}
        </ul>
      </div>
      <div>
        <p class="font-semibold">Steps</p>
        <ol class="mt-1 list-decimal space-y-1 pl-5 text-muted-foreground" data-testid="removal-steps">
          {(preview.steps ?? []).map((s, i) => (
            <li key={i}>{s}</li>
          ))}
        </ol>
      </div>
    </div>
  );
}

/** useRemovalPreview asks the backend for the removal's plan while the dialog is open, again when an option changes. */
function useRemovalPreview(client: Client, name: string, open: boolean, reboot: boolean, force: boolean) {
  const [state, setState] = useState<{ preview: PreviewRemovalResponse | null; error: unknown; loading: boolean }>({ preview: null, error: null, loading: false });
  useEffect(() => {
    if (!open) {
      setState({ preview: null, error: null, loading: false });
      return;
    }
    let stop = false;
    setState((s) => ({ ...s, error: null, loading: true }));
    client.previewRemoval({ name, reboot, force }).then(
      (preview) => !stop && setState({ preview, error: null, loading: false }),
      (error) => !stop && setState({ preview: null, error, loading: false }),
    );
    return () => {
      stop = true;
    };
  }, [open, name, reboot, force]);
  return state;
}

function RemoveDialog({ m, open, onClose }: { m: Machine; open: boolean; onClose: () => void }) {
  const { client } = useConsole();
  const [typed, setTyped] = useState("");
  const [reboot, setReboot] = useState(true);
  const [force, setForce] = useState(false);
  const [busy, setBusy] = useState(false);
  const [error, setError] = useState<unknown>(null);
  const name = m.name ?? "";
  const { preview, error: previewError, loading } = useRemovalPreview(client, name, open, reboot, force);
  // The preview of the options shown, and the checks allow it now.
  const allowed = !loading && preview?.allowed === true;
  function close() {
    setTyped("");
    setForce(false);
    setError(null);
    onClose();
  }
  async function submit(e: Event) {
    e.preventDefault();
    if (typed !== name || !allowed) return;
    setBusy(true);
    setError(null);
    try {
      await client.removeMachine({ name, body: { reboot, force } });
      close();
    } catch (err) {
      setError(err);
    } finally {
      setBusy(false);
    }
  }
  return (
    <Dialog open={open} onClose={close} title={`Remove ${name}?`} description={<>What the controller would do, from what Ichor knows now. Counts are those of the approved machines; the live etcd members are checked again before a member leaves.</>}>
      <form onSubmit={submit} class="flex flex-col gap-3">
        <Checkbox id="remove-reboot" checked={reboot} onChange={(e) => setReboot(e.currentTarget.checked)} label="Reboot into maintenance mode after the reset (instead of powering off)" />
        <Checkbox id="remove-force" checked={force} onChange={(e) => setForce(e.currentTarget.checked)} label="Dead hardware: skip drain and reset (the node is NOT wiped)" />
        <RemovalPreview preview={preview} loading={loading} error={previewError} name={name} />
        <Field id="remove-confirm" label={`Type ${name} to confirm`}>
          <Input id="remove-confirm" value={typed} onInput={(e) => setTyped(e.currentTarget.value)} autoComplete="off" spellcheck={false} />
        </Field>
        <ErrorAlert error={error} what={`Removing ${name}`} />
        <div class="flex justify-end gap-2">
          <Button variant="outline" onClick={close}>
            Cancel
          </Button>
          <Button type="submit" variant="destructive" disabled={typed !== name || busy || !allowed} data-testid="remove-confirm-button">
            {busy ? "Removing…" : "Remove node"}
          </Button>
        </div>
      </form>
    </Dialog>
  );
}

function Summary({ m }: { m: Machine }) {
  return (
    <div class="grid grid-cols-1 gap-4 lg:grid-cols-2">
      <Card>
        <CardHeader>
          <CardTitle>Machine</CardTitle>
        </CardHeader>
        <CardContent>
          <dl class="grid grid-cols-1 gap-3 text-sm sm:grid-cols-2">
            <Detail k="Role" v={m.role} />
            <Detail k="Stage" v={m.stage} />
            <Detail k="Address" v={m.address} mono />
            <Detail k="Hostname" v={m.hostname} />
            <Detail k="Talos version" v={m.talosVersion} />
            <Detail k="Installed" v={m.installed ? "yes" : "no"} />
            <Detail k="Approved by" v={m.approval?.decidedBy ? `${m.approval.decidedBy}, ${timeAgo(m.approval.decidedAt)}` : undefined} />
            <Detail k="Created" v={timeAgo(m.createdAt)} />
            <Detail k="UUID" v={m.identity?.uuid} mono />
            <Detail k="Serial" v={m.identity?.serial} mono />
            <Detail k="MACs" v={m.identity?.macAddresses?.join(", ")} mono />
            <Detail k="Maintenance certificate" v={m.maintenanceFingerprint} mono />
          </dl>
        </CardContent>
      </Card>
      <Card>
        <CardHeader>
          <CardTitle>Conditions</CardTitle>
        </CardHeader>
        <CardContent>
          <ul class="divide-y text-sm">
            {(m.conditions ?? []).map((c) => (
              <li key={c.type} class="flex flex-col gap-1 py-2">
                <div class="flex flex-wrap items-center gap-2">
                  <span class="font-medium">{c.type}</span>
                  <Badge tone={c.status === "True" ? "ok" : c.status === "False" ? "bad" : "neutral"}>{c.status}</Badge>
                  <span class="text-muted-foreground">{c.reason}</span>
                  <span class="ml-auto text-xs text-muted-foreground">{timeAgo(c.lastTransitionTime)}</span>
                </div>
                {c.message && <p class="break-words text-muted-foreground">{c.message}</p>}
              </li>
            ))}
          </ul>
          {m.driftPaths?.length ? <Alert tone="warn" title="Drift">{m.driftPaths.join(", ")}</Alert> : null}
          {m.rebootRequiredPaths?.length ? <Alert tone="warn" title="Waits for a reboot">{m.rebootRequiredPaths.join(", ")}</Alert> : null}
          {m.removal?.phase && <Alert tone="warn" title={`Removal: ${m.removal.phase}`}>{m.removal.message}</Alert>}
        </CardContent>
      </Card>
    </div>
  );
}

function Storage({ m, client }: { m: Machine; client: Client }) {
  const disks = useCall(`disks-${m.name}`, () => client.getNodeDisks({ name: m.name ?? "" }));
  const links = useCall(`links-${m.name}`, () => client.getNodeLinks({ name: m.name ?? "" }));
  const installKey = m.installDisk ? Object.entries(m.installDisk).find(([, v]) => v) : undefined;
  return (
    <div class="flex flex-col gap-4">
      <Card>
        <CardHeader>
          <CardTitle>Disk roles</CardTitle>
        </CardHeader>
        <CardContent class="flex flex-col gap-2 text-sm">
          <div>
            Install disk: {installKey ? <span class="font-mono text-xs">{installKey[0]}={installKey[1]}</span> : "the only discovered disk"}
          </div>
          {(m.disks ?? []).map((d, i) => {
            const k = d.disk ? Object.entries(d.disk).find(([, v]) => v) : undefined;
            return (
              <div key={i}>
                <Badge>{d.role}</Badge> <span class="font-mono text-xs">{k ? `${k[0]}=${k[1]}` : "?"}</span> {d.volumeName && `volume ${d.volumeName}`} {d.maxSize && `max ${d.maxSize}`}
              </div>
            );
          })}
          {m.network?.macAddress && (
            <div>
              Primary NIC <span class="font-mono text-xs">{m.network.macAddress}</span>: {m.network.dhcp ? "DHCP" : `static ${m.network.addresses?.join(", ")} via ${m.network.gateway || "—"}`}
              {m.network.vlan ? `, VLAN ${m.network.vlan}` : ""}
            </div>
          )}
        </CardContent>
      </Card>
      <Card>
        <CardHeader>
          <CardTitle>Disks</CardTitle>
        </CardHeader>
        <CardContent>
          <ErrorAlert error={disks.error} what="Reading the node's disks" />
          <Loading when={disks.loading} />
          <Table label="Node disks">
            <THead>
              <tr>
                <TH>Device</TH>
                <TH>Size</TH>
                <TH>Model</TH>
                <TH>Transport</TH>
                <TH>Stable id</TH>
              </tr>
            </THead>
            <TBody>
              {(disks.data?.disks ?? m.hardware?.disks ?? []).map((d) => {
                const s = stableKey(d);
                return (
                  <TR key={d.devicePath}>
                    <TD class="font-mono text-xs">{d.devicePath}</TD>
                    <TD>{bytes(d.sizeBytes)}</TD>
                    <TD>{"model" in d ? (d.model as string) : "—"}</TD>
                    <TD>{"transport" in d ? (d.transport as string) : "—"}</TD>
                    <TD class="break-all">{s ? `${stableLabel[s.key]} ${s.value}` : "—"}</TD>
                  </TR>
                );
              })}
            </TBody>
          </Table>
        </CardContent>
      </Card>
      <Card>
        <CardHeader>
          <CardTitle>Network links</CardTitle>
        </CardHeader>
        <CardContent>
          <ErrorAlert error={links.error} what="Reading the node's links" />
          <Loading when={links.loading} />
          <Table label="Node links">
            <THead>
              <tr>
                <TH>Name</TH>
                <TH>MAC</TH>
                <TH>State</TH>
                <TH>Addresses</TH>
              </tr>
            </THead>
            <TBody>
              {links.data?.links
                ? links.data.links.map((l) => (
                    <TR key={l.name}>
                      <TD>
                        {l.name} {l.aliases?.length ? <span class="text-xs text-muted-foreground">({l.aliases.join(", ")})</span> : null}
                      </TD>
                      <TD class="font-mono text-xs">{l.permanentAddr || l.hardwareAddr}</TD>
                      <TD>{l.operationalState}</TD>
                      <TD class="font-mono text-xs">{l.addresses?.join(", ")}</TD>
                    </TR>
                  ))
                : (m.hardware?.links ?? []).map((l) => (
                    <TR key={l.name}>
                      <TD>{l.name}</TD>
                      <TD class="font-mono text-xs">{l.permanentMac}</TD>
                      <TD>—</TD>
                      <TD class="font-mono text-xs">{l.addresses?.join(", ")}</TD>
                    </TR>
                  ))}
            </TBody>
          </Table>
        </CardContent>
      </Card>
    </div>
  );
}

function Logs({ m, client, services }: { m: Machine; client: Client; services: string[] }) {
  const [service, setService] = useState(services.includes("kubelet") ? "kubelet" : services[0] ?? "kernel");
  const [lines, setLines] = useState<string[]>([]);
  const [error, setError] = useState<unknown>(null);
  const [follow, setFollow] = useState(true);
  const box = useRef<HTMLPreElement>(null);
  useEffect(() => {
    const ac = new AbortController();
    let token = "";
    let buf: string[] = [];
    setLines([]);
    setError(null);
    (async () => {
      let delay = 1000;
      while (!ac.signal.aborted) {
        try {
          await client.streamNodeLogs(
            { name: m.name ?? "", service, tailLines: 200, follow, resumeToken: token || undefined },
            (l) => {
              token = l.resumeToken || token;
              buf = [...buf.slice(-1999), l.line ?? ""];
              setLines(buf);
              delay = 1000;
            },
            { signal: ac.signal },
          );
          if (!follow) return;
        } catch (e) {
          if (ac.signal.aborted) return;
          setError(e);
          if (!(e instanceof Error) || (e as { unimplemented?: boolean }).unimplemented || (e as { forbidden?: boolean }).forbidden) return;
        }
        await new Promise((r) => setTimeout(r, delay));
        delay = Math.min(delay * 2, 15000);
      }
    })();
    return () => ac.abort();
  }, [m.name, service, follow]);
  useEffect(() => {
    if (box.current) box.current.scrollTop = box.current.scrollHeight;
  }, [lines]);
  return (
    <Card>
      <CardHeader>
        <div class="flex flex-wrap items-end gap-3">
          <CardTitle>Logs</CardTitle>
          <Field id="log-service" label="Service" class="w-48">
            <Select id="log-service" value={service} onChange={(e) => setService(e.currentTarget.value)}>
              {[...new Set([...services, "kernel"])].map((s) => (
                <option key={s} value={s}>
                  {s}
                </option>
              ))}
            </Select>
          </Field>
          <Checkbox id="log-follow" checked={follow} onChange={(e) => setFollow(e.currentTarget.checked)} label="Follow" />
        </div>
      </CardHeader>
      <CardContent>
        <ErrorAlert error={error} what="Streaming the log" />
        <pre ref={box} tabIndex={0} aria-label={`${service} log`} class="max-h-96 overflow-auto rounded-md bg-muted p-3 font-mono text-xs leading-relaxed whitespace-pre-wrap break-all">
          {lines.length ? lines.join("\n") : "No lines yet."}
        </pre>
      </CardContent>
    </Card>
  );
}

function Talos({ m, client }: { m: Machine; client: Client }) {
  const svc = useCall(`svc-${m.name}`, () => client.getNodeServices({ name: m.name ?? "" }));
  const ids = (svc.data?.services ?? []).map((s) => s.id ?? "").filter(Boolean);
  return (
    <div class="flex flex-col gap-4">
      <Card>
        <CardHeader>
          <CardTitle>Services</CardTitle>
        </CardHeader>
        <CardContent>
          <ErrorAlert error={svc.error} what="Reading the node's services" />
          <Loading when={svc.loading} />
          {svc.data && (svc.data.services ?? []).length === 0 && <p class="text-sm text-muted-foreground">The node reports no services.</p>}
          {svc.data && (svc.data.services ?? []).length > 0 && (
            <Table label="Talos services">
              <THead>
                <tr>
                  <TH>Service</TH>
                  <TH>State</TH>
                  <TH>Health</TH>
                  <TH>Last event</TH>
                </tr>
              </THead>
              <TBody>
                {(svc.data.services ?? []).map((s) => (
                  <TR key={s.id}>
                    <TD class="font-medium">{s.id}</TD>
                    <TD>{s.state}</TD>
                    <TD>{s.healthUnknown ? <Badge>unknown</Badge> : s.healthy ? <Badge tone="ok">healthy</Badge> : <Badge tone="bad" title={s.healthMessage}>unhealthy</Badge>}</TD>
                    <TD class="text-muted-foreground">
                      {s.lastEvent} {s.lastEventTime && `(${timeAgo(s.lastEventTime)})`}
                    </TD>
                  </TR>
                ))}
              </TBody>
            </Table>
          )}
        </CardContent>
      </Card>
      <Logs m={m} client={client} services={ids} />
    </div>
  );
}

function Kubernetes({ m, client }: { m: Machine; client: Client }) {
  const cp = m.role === "controlplane";
  const etcd = useCall(`etcd-${m.name}-${cp}`, () => (cp ? client.getNodeEtcdMembers({ name: m.name ?? "" }) : Promise.resolve(null)));
  return (
    <div class="grid grid-cols-1 gap-4 lg:grid-cols-2">
      <Card>
        <CardHeader>
          <CardTitle>Kubernetes</CardTitle>
        </CardHeader>
        <CardContent>
          <dl class="grid grid-cols-1 gap-3 text-sm sm:grid-cols-2">
            <Detail k="Node name" v={m.nodeName} />
            <Detail k="Role" v={m.role} />
          </dl>
          <h3 class="mt-3 text-sm font-medium">Labels Ichor sets</h3>
          <ul class="mt-1 flex flex-wrap gap-1">
            {Object.entries(m.labels ?? {}).map(([k, v]) => (
              <li key={k}>
                <Badge>
                  {k}={v}
                </Badge>
              </li>
            ))}
            {Object.keys(m.labels ?? {}).length === 0 && <li class="text-sm text-muted-foreground">none</li>}
          </ul>
        </CardContent>
      </Card>
      <Card>
        <CardHeader>
          <CardTitle>etcd</CardTitle>
        </CardHeader>
        <CardContent>
          {!cp && <p class="text-sm text-muted-foreground">A worker runs no etcd member.</p>}
          <ErrorAlert error={etcd.error} what="Reading the etcd members" />
          <Loading when={etcd.loading} />
          {etcd.data && (
            <Table label="etcd members">
              <THead>
                <tr>
                  <TH>Member</TH>
                  <TH>Hostname</TH>
                  <TH>Peer URLs</TH>
                </tr>
              </THead>
              <TBody>
                {(etcd.data.members ?? []).map((e) => (
                  <TR key={e.id}>
                    <TD class="font-mono text-xs">
                      {e.id} {e.learner && <Badge tone="warn">learner</Badge>}
                    </TD>
                    <TD>{e.hostname}</TD>
                    <TD class="font-mono text-xs break-all">{e.peerUrls?.join(", ")}</TD>
                  </TR>
                ))}
              </TBody>
            </Table>
          )}
        </CardContent>
      </Card>
    </div>
  );
}

function Configuration({ m, client }: { m: Machine; client: Client }) {
  const cfg = useCall<GetEffectiveConfigResponse>(`cfg-${m.name}-${m.resourceVersion}`, () => client.getEffectiveConfig({ name: m.name ?? "" }));
  const [filter, setFilter] = useState("");
  const entries = (cfg.data?.entries ?? []).filter((e) => !filter || `${e.kind} ${e.documentName} ${e.field} ${e.originLayer} ${e.originPatch}`.toLowerCase().includes(filter.toLowerCase()));
  return (
    <Card>
      <CardHeader>
        <CardTitle>Effective configuration</CardTitle>
      </CardHeader>
      <CardContent class="flex flex-col gap-3">
        <ErrorAlert error={cfg.error} what="Reading the effective configuration" />
          <Loading when={cfg.loading} />
        {cfg.data && (
          <>
            <div class="flex flex-wrap gap-1 text-xs" aria-label="Layers, bottom-up">
              {(cfg.data.steps ?? []).map((s, i) => (
                <Badge key={i}>
                  {s.layer}
                  {s.name ? `: ${s.name}` : ""}
                  {s.priority ? ` (${s.priority})` : ""}
                </Badge>
              ))}
            </div>
            <Field id="cfg-filter" label="Filter" class="sm:w-80">
              <Input id="cfg-filter" value={filter} onInput={(e) => setFilter(e.currentTarget.value)} placeholder="machine.install" />
            </Field>
            <Table label="Effective configuration values">
              <THead>
                <tr>
                  <TH>Document</TH>
                  <TH>Field</TH>
                  <TH>Value</TH>
                  <TH>Set by</TH>
                </tr>
              </THead>
              <TBody>
                {entries.map((e, i) => (
                  <TR key={i}>
                    <TD class="text-xs">
                      {e.kind}
                      {e.documentName ? `/${e.documentName}` : ""}
                    </TD>
                    <TD class="font-mono text-xs break-all">{e.field}</TD>
                    <TD class="font-mono text-xs break-all">{e.secret ? <Badge tone="warn" title="Secret: masked">●●●●●● secret</Badge> : e.valueJson}</TD>
                    <TD class="text-xs">
                      <Badge>{e.originLayer}</Badge> {e.originPatch}
                    </TD>
                  </TR>
                ))}
              </TBody>
            </Table>
          </>
        )}
      </CardContent>
    </Card>
  );
}

export function NodePage({ name, tab }: { name: string; tab: string }) {
  const { machines, synced, canWrite, client } = useConsole();
  const [removing, setRemoving] = useState(false);
  const m = machines.find((x) => x.name === name);
  if (!m) {
    return synced ? (
      <Alert tone="warn" title={`No machine ${name}`}>
        It may have been removed. <a href="/nodes" class="underline">Back to Nodes</a>
      </Alert>
    ) : (
      <p class="text-sm text-muted-foreground" role="status">
        Loading…
      </p>
    );
  }
  const base = `/nodes/${encodeURIComponent(name)}`;
  const active = tabs.some((t) => t.id === tab) ? tab : "summary";
  return (
    <>
      <div class="flex flex-wrap items-center gap-3">
        <h1 class="text-xl font-semibold break-all">{name}</h1>
        <StateBadge m={m} />
        {m.role && <Badge>{m.role}</Badge>}
        {canWrite && m.approval?.state === api.ApprovalApproved && !m.deleting && (
          <Button variant="destructive" size="sm" class="ml-auto" onClick={() => setRemoving(true)} data-testid="remove-node">
            Remove node…
          </Button>
        )}
      </div>
      <Tabs label="Node sections" tabs={tabs} active={active} hrefOf={(id) => (id === "summary" ? base : `${base}/${id}`)} />
      <div id="tab-panel" role="tabpanel" aria-labelledby={`tab-${active}`}>
        {active === "summary" && <Summary m={m} />}
        {active === "storage" && <Storage m={m} client={client} />}
        {active === "talos" && <Talos m={m} client={client} />}
        {active === "kubernetes" && <Kubernetes m={m} client={client} />}
        {active === "config" && <Configuration m={m} client={client} />}
      </div>
      <RemoveDialog
        m={m}
        open={removing}
        onClose={() => {
          setRemoving(false);
        }}
      />
      {m.deleting && (
        <Alert tone="warn" title="Being removed">
          {m.removal?.phase ?? "Removal started"}. <button class="underline" onClick={() => navigate("/nodes")}>Back to Nodes</button>
        </Alert>
      )}
    </>
  );
}
