import { useState } from "preact/hooks";
import { useConsole } from "../context";
import type { DiskRole, DiscoveredDisk, Machine, MachineNetwork } from "../api/generated";
import { bytes, isStable, selectorOf, stableKey, stableLabel } from "../lib/disks";
import { timeAgo } from "../lib/status";
import { discoveryTone } from "../lib/discovery";
import { Card, CardContent, CardDescription, CardHeader, CardTitle } from "../components/ui/card";
import { Button } from "../components/ui/button";
import { Checkbox, Field, Input, Select, focusFirst } from "../components/ui/input";
import { Alert } from "../components/ui/alert";
import { Badge } from "../components/ui/badge";
import { Table, TBody, TD, TH, THead, TR } from "../components/ui/table";
import { ErrorAlert } from "../components/errors";
import { ResetAndAdd } from "./reclaim";
import { ScanNow } from "./pause";
import * as api from "../api/v1alpha1";

/** splitList splits a text of addresses on commas, spaces and new lines. */
export function splitList(s: string): string[] {
  return s
    .split(/[\s,]+/)
    .map((x) => x.trim())
    .filter(Boolean);
}

/** Register registers addresses and subnets for discovery and shows what it found; onReclaim, for admins, starts a reset of a machine another cluster configured. */
function Register({ onReclaim }: { onReclaim?: (address: string) => void }) {
  const { client, cluster, refreshCluster, canWrite } = useConsole();
  const [addresses, setAddresses] = useState("");
  const [subnets, setSubnets] = useState("");
  const [busy, setBusy] = useState(false);
  const [error, setError] = useState<unknown>(null);
  const [done, setDone] = useState("");
  const [fieldError, setFieldError] = useState("");
  const d = cluster?.discovery;

  async function submit(e: Event) {
    e.preventDefault();
    setError(null);
    setDone("");
    const body = { addresses: splitList(addresses), subnets: splitList(subnets) };
    if (body.addresses.length + body.subnets.length === 0) {
      setFieldError("Give at least one address or subnet.");
      focusFirst({ "disc-addresses": "x" }, ["disc-addresses"]);
      return;
    }
    setFieldError("");
    setBusy(true);
    try {
      await client.addDiscovery({ body });
      setDone(`Registered ${[...body.addresses, ...body.subnets].join(", ")}. Discovery probes them now.`);
      setAddresses("");
      setSubnets("");
      refreshCluster();
    } catch (err) {
      setError(err);
    } finally {
      setBusy(false);
    }
  }

  return (
    <Card aria-labelledby="register-title">
      <CardHeader>
        <CardTitle>
          <span id="register-title">Register machines</span>
        </CardTitle>
        <CardDescription>Machines in maintenance mode, by address or by a subnet to scan for the Talos API port.</CardDescription>
      </CardHeader>
      <CardContent class="flex flex-col gap-4">
        {canWrite && (
          <form onSubmit={submit} class="grid grid-cols-1 gap-3 md:grid-cols-[1fr_1fr_auto] md:items-end">
            <Field id="disc-addresses" label="Addresses" hint="IP addresses, separated by commas or spaces" error={fieldError}>
              <Input id="disc-addresses" value={addresses} onInput={(e) => setAddresses(e.currentTarget.value)} placeholder="192.168.1.20" aria-describedby="disc-addresses-hint" />
            </Field>
            <Field id="disc-subnets" label="Subnets to scan" hint="CIDRs, for example 192.168.1.0/24">
              <Input id="disc-subnets" value={subnets} onInput={(e) => setSubnets(e.currentTarget.value)} placeholder="192.168.1.0/24" aria-describedby="disc-subnets-hint" />
            </Field>
            <Button type="submit" disabled={busy} class="md:mb-5">
              {busy ? "Registering…" : "Register"}
            </Button>
          </form>
        )}
        <ErrorAlert error={error} what="Registering" />
        {done && <Alert tone="info">{done}</Alert>}
        {d?.message && <Alert tone="warn" title="Discovery settings">{d.message}</Alert>}
        <div class="text-sm text-muted-foreground">Registered: {[...(d?.addresses ?? []), ...(d?.subnets ?? [])].join(", ") || "nothing yet"}</div>
        <ScanNow />
        {(d?.results?.length ?? 0) > 0 && (
          <Table label="Discovery results">
            <THead>
              <tr>
                <TH>Address</TH>
                <TH>Result</TH>
                <TH>Machine</TH>
                <TH>Probed</TH>
              </tr>
            </THead>
            <TBody>
              {d!.results!.map((r) => (
                <TR key={r.address}>
                  <TD label="Address" class="font-mono text-xs">{r.address}</TD>
                  <TD label="Result">
                    <Badge tone={discoveryTone(r.result)}>{r.result}</Badge>
                    {r.message && <div class="text-xs text-muted-foreground">{r.message}</div>}
                    {onReclaim && r.result === api.DiscoveryResultAlreadyConfigured && r.address && (
                      <Button size="sm" variant="outline" class="mt-1" data-testid={`reclaim-${r.address}`} onClick={() => onReclaim(r.address ?? "")}>
                        Reset and add…
                      </Button>
                    )}
                  </TD>
                  <TD label="Machine">{r.machine || "—"}</TD>
                  <TD label="Probed">{timeAgo(r.probedAt)}</TD>
                </TR>
              ))}
            </TBody>
          </Table>
        )}
      </CardContent>
    </Card>
  );
}

function DiskTable({ disks }: { disks: DiscoveredDisk[] }) {
  return (
    <Table label="Disks">
      <THead>
        <tr>
          <TH>Device</TH>
          <TH>Size</TH>
          <TH>Stable id</TH>
          <TH>Contents</TH>
        </tr>
      </THead>
      <TBody>
        {disks.map((d) => {
          const s = stableKey(d);
          return (
            <TR key={d.devicePath}>
              <TD label="Device" class="font-mono text-xs">{d.devicePath}</TD>
              <TD label="Size">{bytes(d.sizeBytes)}</TD>
              <TD label="Stable id">
                {s ? (
                  <span class="break-all">
                    <Badge tone={isStable(s.key) ? "neutral" : "warn"}>{stableLabel[s.key]}</Badge> <span class="font-mono text-xs">{s.value}</span>
                  </span>
                ) : (
                  "—"
                )}
              </TD>
              <TD label="Contents">{d.hasPartitions ? <Badge tone="warn">has partitions</Badge> : "empty"}</TD>
            </TR>
          );
        })}
      </TBody>
    </Table>
  );
}

type Role = "" | typeof api.DiskRoleEphemeral | typeof api.DiskRoleStorage | typeof api.DiskRoleUserVolume;

interface DiskChoice {
  role: Role;
  volumeName: string;
  maxSize: string;
  confirmWipe: boolean;
}

interface LabelRow {
  key: string;
  value: string;
}

/** ApproveForm is the typed approval form: no YAML. */
function ApproveForm({ m, onDone }: { m: Machine; onDone: (msg: string) => void }) {
  const { client } = useConsole();
  const disks = m.hardware?.disks ?? [];
  const links = (m.hardware?.links ?? []).filter((l) => l.permanentMac);
  const id = (s: string) => `approve-${m.name}-${s}`;
  const [role, setRole] = useState<string>(api.RoleWorker);
  const [hostname, setHostname] = useState(m.hostname ?? "");
  const [labels, setLabels] = useState<LabelRow[]>(Object.entries(m.labels ?? {}).map(([key, value]) => ({ key, value })));
  const [install, setInstall] = useState(disks.length === 1 ? disks[0].devicePath ?? "" : "");
  const [confirmWipe, setConfirmWipe] = useState(false);
  const [choices, setChoices] = useState<Record<string, DiskChoice>>({});
  const [nic, setNic] = useState("");
  const [dhcp, setDhcp] = useState(true);
  const [staticAddrs, setStaticAddrs] = useState("");
  const [gateway, setGateway] = useState("");
  const [nameservers, setNameservers] = useState("");
  const [vlan, setVlan] = useState("");
  const [busy, setBusy] = useState(false);
  const [error, setError] = useState<unknown>(null);

  const [errors, setErrors] = useState<Record<string, string>>({});
  const diskId = (dp: string) => id(`disk-${dp.replace(/\W+/g, "-")}`);

  const installDisk = disks.find((d) => d.devicePath === install);
  const installKey = installDisk ? stableKey(installDisk) : null;

  function choice(dp: string): DiskChoice {
    return choices[dp] ?? { role: "", volumeName: "", maxSize: "", confirmWipe: false };
  }
  function setChoice(dp: string, c: Partial<DiskChoice>) {
    setChoices({ ...choices, [dp]: { ...choice(dp), ...c } });
  }

  async function submit(e: Event) {
    e.preventDefault();
    setError(null);
    // Problems by the id of the field that has them, in the form's order.
    const problems: Record<string, string> = {};
    const order: string[] = [];
    const problem = (field: string, text: string) => {
      problems[field] = text;
      order.push(field);
    };
    const labelMap: Record<string, string> = {};
    for (const l of labels) {
      if (!l.key.trim()) continue;
      labelMap[l.key.trim()] = l.value.trim();
    }
    if (disks.length > 1 && !installDisk) problem(id("install"), "Choose the install disk.");
    if (installDisk?.hasPartitions && !confirmWipe) problem(id("wipe"), `The install disk ${installDisk.devicePath} holds partitions: tick the box to confirm wiping it.`);
    const roles: DiskRole[] = [];
    for (const d of disks) {
      if (d.devicePath === install) continue;
      const c = choice(d.devicePath ?? "");
      if (!c.role) continue;
      if (c.role === api.DiskRoleUserVolume && !c.volumeName.trim()) problem(`${diskId(d.devicePath ?? "")}-name`, `Name the user volume on ${d.devicePath}.`);
      if (d.hasPartitions && !c.confirmWipe) problem(`${diskId(d.devicePath ?? "")}-wipe`, `${d.devicePath} holds partitions: confirm wiping it or leave it unused.`);
      roles.push({ disk: selectorOf(d), role: c.role, volumeName: c.volumeName.trim() || undefined, maxSize: c.maxSize.trim() || undefined, confirmWipe: c.confirmWipe || undefined });
    }
    let network: MachineNetwork | undefined;
    if (nic) {
      const v = vlan.trim() === "" ? 0 : Number(vlan);
      if (!Number.isInteger(v) || v < 0 || v > 4094) problem(id("vlan"), "The VLAN ID is a number from 1 to 4094 (empty for none).");
      network = dhcp
        ? { macAddress: nic, dhcp: true, nameservers: splitList(nameservers), vlan: v || undefined }
        : { macAddress: nic, dhcp: false, addresses: splitList(staticAddrs), gateway: gateway.trim() || undefined, nameservers: splitList(nameservers), vlan: v || undefined };
      if (!dhcp && splitList(staticAddrs).length === 0) problem(id("addrs"), "A static configuration needs at least one address in CIDR form (10.0.0.5/24).");
    }
    setErrors(problems);
    if (order.length) {
      focusFirst(problems, order);
      return;
    }
    setBusy(true);
    try {
      await client.approveMachine({
        name: m.name ?? "",
        body: {
          role,
          hostname: hostname.trim() || undefined,
          labels: Object.keys(labelMap).length ? labelMap : undefined,
          installDisk: installDisk ? selectorOf(installDisk) : undefined,
          confirmWipe: confirmWipe || undefined,
          disks: roles.length ? roles : undefined,
          network,
        },
      });
      onDone(`Approved ${m.name} as ${role}. It installs and joins now; follow it on Nodes.`);
    } catch (err) {
      setError(err);
    } finally {
      setBusy(false);
    }
  }

  return (
    <form onSubmit={submit} class="flex flex-col gap-4 border-t pt-4" aria-label={`Approve ${m.name}`}>
      <div class="grid grid-cols-1 gap-3 md:grid-cols-3">
        <Field id={id("role")} label="Role">
          <Select id={id("role")} value={role} onChange={(e) => setRole(e.currentTarget.value)}>
            <option value={api.RoleWorker}>Worker</option>
            <option value={api.RoleControlPlane}>Control plane</option>
          </Select>
        </Field>
        <Field id={id("hostname")} label="Hostname" hint="Empty keeps the machine's">
          <Input id={id("hostname")} value={hostname} onInput={(e) => setHostname(e.currentTarget.value)} />
        </Field>
        <Field id={id("install")} label="Install disk" error={errors[id("install")]} hint={installKey ? `Keyed on its ${stableLabel[installKey.key]}: ${installKey.value}` : disks.length === 0 ? "No disk was discovered" : "The disk Talos installs to"}>
          <Select id={id("install")} value={install} onChange={(e) => setInstall(e.currentTarget.value)} required={disks.length > 1}>
            {disks.length !== 1 && <option value="">Choose…</option>}
            {disks.map((d) => (
              <option key={d.devicePath} value={d.devicePath}>
                {d.devicePath} · {bytes(d.sizeBytes)}
              </option>
            ))}
          </Select>
        </Field>
      </div>
      {installKey && !isStable(installKey.key) && (
        <Alert tone="warn" title="Nothing stable to key this disk on">
          The disk has no WWID, serial, by-id or bus path, so it is chosen by its device path ({installKey.value}), which can change across boots.
        </Alert>
      )}
      {installDisk?.hasPartitions && <Checkbox id={id("wipe")} error={errors[id("wipe")]} checked={confirmWipe} onChange={(e) => setConfirmWipe(e.currentTarget.checked)} label={`Wipe ${installDisk.devicePath}: it holds partitions or filesystems`} />}

      <fieldset class="flex flex-col gap-2">
        <legend class="text-sm font-medium">Labels</legend>
        {labels.map((l, i) => (
          <div key={i} class="flex flex-wrap gap-2">
            <Input aria-label={`Label ${i + 1} key`} value={l.key} onInput={(e) => setLabels(labels.map((x, j) => (j === i ? { ...x, key: e.currentTarget.value } : x)))} class="flex-1 min-w-32" placeholder="topology.kubernetes.io/zone" />
            <Input aria-label={`Label ${i + 1} value`} value={l.value} onInput={(e) => setLabels(labels.map((x, j) => (j === i ? { ...x, value: e.currentTarget.value } : x)))} class="flex-1 min-w-32" placeholder="rack-1" />
            <Button variant="ghost" size="sm" aria-label={`Remove label ${i + 1}`} onClick={() => setLabels(labels.filter((_, j) => j !== i))}>
              Remove
            </Button>
          </div>
        ))}
        <div>
          <Button variant="outline" size="sm" onClick={() => setLabels([...labels, { key: "", value: "" }])}>
            Add label
          </Button>
        </div>
      </fieldset>

      {disks.length > 1 && (
        <fieldset class="flex flex-col gap-2">
          <legend class="text-sm font-medium">Other disks</legend>
          {disks
            .filter((d) => d.devicePath !== install)
            .map((d) => {
              const dp = d.devicePath ?? "";
              const c = choice(dp);
              const s = stableKey(d);
              const rid = diskId(dp);
              return (
                <div key={dp} class="grid grid-cols-1 gap-2 rounded-md border p-2 md:grid-cols-[12rem_1fr_1fr_1fr] md:items-end">
                  <div class="text-sm">
                    <div class="font-mono text-xs">{dp}</div>
                    <div class="text-xs text-muted-foreground">
                      {bytes(d.sizeBytes)} · {s ? `${stableLabel[s.key]} ${s.value}` : "no id"}
                    </div>
                  </div>
                  <Field id={`${rid}-role`} label="Role">
                    <Select id={`${rid}-role`} value={c.role} onChange={(e) => setChoice(dp, { role: e.currentTarget.value as Role })}>
                      <option value="">Unused</option>
                      <option value={api.DiskRoleEphemeral}>Ephemeral (EPHEMERAL on its own disk)</option>
                      <option value={api.DiskRoleStorage}>Storage (prepared by the TalosStorage preset)</option>
                      <option value={api.DiskRoleUserVolume}>User volume</option>
                    </Select>
                  </Field>
                  {c.role === api.DiskRoleUserVolume ? (
                    <Field id={`${rid}-name`} label="Volume name" error={errors[`${rid}-name`]}>
                      <Input id={`${rid}-name`} value={c.volumeName} onInput={(e) => setChoice(dp, { volumeName: e.currentTarget.value })} />
                    </Field>
                  ) : (
                    <div />
                  )}
                  {c.role ? (
                    <Field id={`${rid}-max`} label="Max size" hint="100GiB or 80%; empty for the whole disk">
                      <Input id={`${rid}-max`} value={c.maxSize} onInput={(e) => setChoice(dp, { maxSize: e.currentTarget.value })} />
                    </Field>
                  ) : (
                    <div />
                  )}
                  {c.role && d.hasPartitions && <Checkbox id={`${rid}-wipe`} error={errors[`${rid}-wipe`]} checked={c.confirmWipe} onChange={(e) => setChoice(dp, { confirmWipe: e.currentTarget.checked })} label={`Wipe ${dp}`} />}
                </div>
              );
            })}
        </fieldset>
      )}

      <fieldset class="flex flex-col gap-3">
        <legend class="text-sm font-medium">Network</legend>
        <div class="grid grid-cols-1 gap-3 md:grid-cols-3">
          <Field id={id("nic")} label="Primary NIC" hint="Chosen by its permanent MAC, so a renamed interface still matches">
            <Select id={id("nic")} value={nic} onChange={(e) => setNic(e.currentTarget.value)}>
              <option value="">Default (DHCP on every link)</option>
              {links.map((l) => (
                <option key={l.permanentMac} value={l.permanentMac}>
                  {l.permanentMac} ({l.name}
                  {l.addresses?.length ? `, ${l.addresses.join(", ")}` : ""})
                </option>
              ))}
            </Select>
          </Field>
          {nic && (
            <Field id={id("vlan")} label="VLAN ID" hint="Empty for none" error={errors[id("vlan")]}>
              <Input id={id("vlan")} inputMode="numeric" value={vlan} onInput={(e) => setVlan(e.currentTarget.value)} />
            </Field>
          )}
          {nic && (
            <div class="flex flex-col justify-center gap-2" role="radiogroup" aria-label="Address assignment">
              <label class="flex items-center gap-2 text-sm">
                <input type="radio" name={id("mode")} checked={dhcp} onChange={() => setDhcp(true)} /> DHCP
              </label>
              <label class="flex items-center gap-2 text-sm">
                <input type="radio" name={id("mode")} checked={!dhcp} onChange={() => setDhcp(false)} /> Static
              </label>
            </div>
          )}
        </div>
        {nic && !dhcp && (
          <div class="grid grid-cols-1 gap-3 md:grid-cols-3">
            <Field id={id("addrs")} label="Addresses" hint="CIDR form, 10.0.0.5/24" error={errors[id("addrs")]}>
              <Input id={id("addrs")} value={staticAddrs} onInput={(e) => setStaticAddrs(e.currentTarget.value)} />
            </Field>
            <Field id={id("gw")} label="Gateway">
              <Input id={id("gw")} value={gateway} onInput={(e) => setGateway(e.currentTarget.value)} />
            </Field>
            <Field id={id("dns")} label="Nameservers">
              <Input id={id("dns")} value={nameservers} onInput={(e) => setNameservers(e.currentTarget.value)} />
            </Field>
          </div>
        )}
        {nic && dhcp && (
          <Field id={id("dns")} label="Nameservers" hint="Optional; separated by commas" class="md:w-1/3">
            <Input id={id("dns")} value={nameservers} onInput={(e) => setNameservers(e.currentTarget.value)} />
          </Field>
        )}
      </fieldset>

      <ErrorAlert error={error} what={`Approving ${m.name}`} />
      <div class="flex gap-2">
        <Button type="submit" disabled={busy} data-testid={`approve-submit-${m.name}`}>
          {busy ? "Approving…" : `Approve ${m.name}`}
        </Button>
      </div>
    </form>
  );
}

function Pending({ m }: { m: Machine }) {
  const { canWrite, client } = useConsole();
  const [open, setOpen] = useState(false);
  const [msg, setMsg] = useState("");
  const [error, setError] = useState<unknown>(null);
  const hw = m.hardware;
  return (
    <Card data-pending={m.name} aria-labelledby={`pending-${m.name}`}>
      <CardHeader>
        <div class="flex flex-wrap items-center justify-between gap-2">
          <CardTitle>
            <span id={`pending-${m.name}`}>{m.name}</span>
          </CardTitle>
          {canWrite && !open && (
            <div class="flex gap-2">
              <Button size="sm" onClick={() => setOpen(true)} data-testid={`approve-${m.name}`}>
                Approve…
              </Button>
              <Button
                size="sm"
                variant="outline"
                onClick={async () => {
                  setError(null);
                  try {
                    await client.rejectMachine({ name: m.name ?? "", body: {} });
                  } catch (e) {
                    setError(e);
                  }
                }}
              >
                Reject
              </Button>
            </div>
          )}
        </div>
        <CardDescription>
          {hw?.manufacturer || "Unknown maker"} {hw?.productName || ""} at <span class="font-mono">{m.address}</span> · discovered {timeAgo(m.createdAt)}
        </CardDescription>
      </CardHeader>
      <CardContent class="flex flex-col gap-3">
        <dl class="grid grid-cols-1 gap-2 text-sm sm:grid-cols-3">
          <div class="min-w-0">
            <dt class="text-xs text-muted-foreground">UUID</dt>
            <dd class="break-all font-mono text-xs">{m.identity?.uuid || <Badge tone="warn">empty: check the machine</Badge>}</dd>
          </div>
          <div class="min-w-0">
            <dt class="text-xs text-muted-foreground">Serial</dt>
            <dd class="break-all font-mono text-xs">{m.identity?.serial || "—"}</dd>
          </div>
          <div class="min-w-0">
            <dt class="text-xs text-muted-foreground">MAC addresses</dt>
            <dd class="break-all font-mono text-xs">{m.identity?.macAddresses?.join(", ") || "—"}</dd>
          </div>
        </dl>
        {(hw?.disks?.length ?? 0) > 0 ? <DiskTable disks={hw!.disks!} /> : <p class="text-sm text-muted-foreground">No disks reported.</p>}
        {msg && <Alert tone="info">{msg}</Alert>}
        <ErrorAlert error={error} what={`Rejecting ${m.name}`} />
        {open && (
          <ApproveForm
            m={m}
            onDone={(t) => {
              setMsg(t);
              setOpen(false);
            }}
          />
        )}
      </CardContent>
    </Card>
  );
}

/**
 * AddNode is the page's main job first: the machines waiting for approval,
 * then registering addresses to discover, then (collapsed, for admins) the
 * reset of a machine another cluster configured, prefilled from the
 * discovery row that found it.
 */
export function AddNode() {
  const { machines, synced, canWrite, me } = useConsole();
  const pending = machines.filter((m) => m.approval?.state === api.ApprovalPending && !m.deleting);
  const admin = !!me?.groups?.includes("ichor:admin");
  const [reclaimOpen, setReclaimOpen] = useState(false);
  const [prefill, setPrefill] = useState<{ address: string; n: number } | null>(null);
  return (
    <>
      <h1 class="text-xl font-semibold">Add node</h1>
      {!canWrite && <Alert tone="info">You can look, but approving and registering machines needs the operator or admin role.</Alert>}
      <section aria-labelledby="pending-title" class="flex flex-col gap-4">
        <h2 id="pending-title" class="text-lg font-semibold">
          Waiting for approval{synced ? ` (${pending.length})` : ""}
        </h2>
        {!synced && (
          <p class="text-sm text-muted-foreground" role="status">
            Loading…
          </p>
        )}
        {synced && pending.length === 0 && (
          <p class="text-sm text-muted-foreground" data-testid="no-pending">
            No machine waits for approval. Register an address or a subnet below; the machines discovery finds in maintenance mode show here.
          </p>
        )}
        {pending.map((m) => (
          <Pending key={m.name} m={m} />
        ))}
      </section>
      <Register
        onReclaim={
          admin
            ? (address) => {
                setReclaimOpen(true);
                setPrefill((p) => ({ address, n: (p?.n ?? 0) + 1 }));
              }
            : undefined
        }
      />
      {admin && <ResetAndAdd open={reclaimOpen} onToggle={setReclaimOpen} prefill={prefill} />}
    </>
  );
}
