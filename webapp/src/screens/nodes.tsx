import { useState } from "preact/hooks";
import { useConsole } from "../context";
import type { Machine } from "../api/generated";
import { StateBadge, StateDetail } from "../components/state";
import { Card, CardContent } from "../components/ui/card";
import { Table, TBody, TD, TH, THead, TR } from "../components/ui/table";
import { LinkButton } from "../components/ui/button";
import { Input, Select } from "../components/ui/input";
import { ErrorAlert } from "../components/errors";
import { matches, sortMachines, type SortDir, type SortKey, type StateFilter } from "../lib/nodes";
import { tabHref } from "../lib/node";
import * as api from "../api/v1alpha1";

const columns: { key: SortKey; label: string }[] = [
  { key: "name", label: "Name" },
  { key: "state", label: "State" },
  { key: "role", label: "Role" },
  { key: "address", label: "Address" },
  { key: "talos", label: "Talos" },
  { key: "stage", label: "Stage" },
];

/** SortHeader is a column header that sorts the list by its column, and says how it is sorted (aria-sort). */
function SortHeader({ col, sort, dir, onSort }: { col: { key: SortKey; label: string }; sort: SortKey; dir: SortDir; onSort: (k: SortKey) => void }) {
  const active = sort === col.key;
  return (
    <TH sort={active ? (dir === "asc" ? "ascending" : "descending") : "none"}>
      <button type="button" class="inline-flex items-center gap-1 uppercase hover:text-foreground" onClick={() => onSort(col.key)} data-sort={col.key}>
        {col.label}
        <span aria-hidden="true">{active ? (dir === "asc" ? "▲" : "▼") : ""}</span>
      </button>
    </TH>
  );
}

/** RowActions are a machine's actions in the list: approve a pending one, else open its node page or its logs. */
function RowActions({ m, canWrite }: { m: Machine; canWrite: boolean }) {
  if (m.approval?.state === api.ApprovalPending) {
    return (
      <LinkButton size="sm" href="/add-node">
        {canWrite ? "Approve…" : "Review"}
      </LinkButton>
    );
  }
  if (m.approval?.state !== api.ApprovalApproved) return null;
  return (
    <div class="flex flex-wrap gap-1">
      <LinkButton size="sm" href={tabHref(m.name ?? "", "summary")}>
        Open
      </LinkButton>
      <LinkButton size="sm" variant="ghost" href={tabHref(m.name ?? "", "kubernetes")}>
        Kubernetes
      </LinkButton>
    </div>
  );
}

export function Nodes() {
  const { machines, synced, watchError, canWrite } = useConsole();
  const [text, setText] = useState("");
  const [state, setState] = useState<StateFilter>("all");
  const [sort, setSort] = useState<SortKey>("name");
  const [dir, setDir] = useState<SortDir>("asc");
  const onSort = (k: SortKey) => {
    if (k === sort) setDir(dir === "asc" ? "desc" : "asc");
    else {
      setSort(k);
      setDir("asc");
    }
  };
  const shown = sortMachines(
    machines.filter((m) => matches(m, text, state)),
    sort,
    dir,
  );
  return (
    <>
      <div class="flex flex-wrap items-center justify-between gap-2">
        <h1 class="text-xl font-semibold">Nodes</h1>
        {canWrite && (
          <LinkButton href="/add-node" variant="default">
            Add node
          </LinkButton>
        )}
      </div>
      <ErrorAlert error={watchError} what="Watching the machines" />
      <div class="flex flex-wrap items-end gap-2">
        <label class="flex min-w-48 flex-1 flex-col gap-1 text-sm">
          <span class="font-medium">Filter</span>
          <Input type="search" value={text} placeholder="Name, address, role, version" onInput={(e) => setText((e.target as HTMLInputElement).value)} data-testid="nodes-filter" />
        </label>
        <label class="flex flex-col gap-1 text-sm">
          <span class="font-medium">Show</span>
          <Select value={state} onChange={(e) => setState((e.target as HTMLSelectElement).value as StateFilter)} data-testid="nodes-state">
            <option value="all">All machines</option>
            <option value="problems">With a problem</option>
            <option value="ready">Ready</option>
            <option value="pending">Waiting for approval</option>
          </Select>
        </label>
      </div>
      <Card>
        <CardContent class="p-0 pt-0">
          <Table label="Machines">
            <THead>
              <tr>
                {columns.map((c) => (
                  <SortHeader key={c.key} col={c} sort={sort} dir={dir} onSort={onSort} />
                ))}
                <TH>Actions</TH>
              </tr>
            </THead>
            <TBody>
              {shown.map((m) => (
                <TR key={m.name} data-machine={m.name}>
                  <TD label="Name">
                    {m.approval?.state === api.ApprovalPending ? (
                      <a href="/add-node" class="font-medium hover:underline">
                        {m.name}
                      </a>
                    ) : (
                      <a href={`/nodes/${encodeURIComponent(m.name ?? "")}`} class="font-medium hover:underline">
                        {m.name}
                      </a>
                    )}
                    {m.hostname && m.hostname !== m.name && <div class="text-xs text-muted-foreground">{m.hostname}</div>}
                  </TD>
                  <TD label="State" data-col="state">
                    <StateBadge m={m} />
                    <StateDetail m={m} />
                  </TD>
                  <TD label="Role" data-col="role">{m.role || "—"}</TD>
                  <TD label="Address" class="font-mono text-xs" data-col="address">{m.address || "—"}</TD>
                  <TD label="Talos" class="font-mono text-xs">{m.talosVersion || "—"}</TD>
                  <TD label="Stage" data-col="stage">{m.stage || "—"}</TD>
                  <TD label="Actions">
                    <RowActions m={m} canWrite={canWrite} />
                  </TD>
                </TR>
              ))}
            </TBody>
          </Table>
          {synced && machines.length === 0 && <p class="p-4 text-sm text-muted-foreground">No machines yet. Add one by address or subnet.</p>}
          {synced && machines.length > 0 && shown.length === 0 && (
            <p class="p-4 text-sm text-muted-foreground" data-testid="nodes-none">
              No machine matches the filter.
            </p>
          )}
          {!synced && <p class="p-4 text-sm text-muted-foreground" role="status">Loading machines…</p>}
        </CardContent>
      </Card>
    </>
  );
}
