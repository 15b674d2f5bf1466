import { useState } from "preact/hooks";
import type { Client, GetEffectiveConfigResponse, Machine } from "../../api/generated";
import { useCall } from "../../lib/call";
import { configEntryMatches } from "../../lib/node";
import { Card, CardContent, CardHeader, CardTitle } from "../../components/ui/card";
import { Badge } from "../../components/ui/badge";
import { Field, Input } from "../../components/ui/input";
import { Table, TBody, TD, TH, THead, TR } from "../../components/ui/table";
import { ErrorAlert } from "../../components/errors";
import { Loading } from "../../components/loading";

/** Configuration is the node page's configuration tab: the render's layers and every value with the layer that set it (secrets masked), read again when the machine changes. */
export function Configuration({ m, client }: { m: Machine; client: Client }) {
  const cfg = useCall<GetEffectiveConfigResponse>(`cfg-${m.name}-${m.resourceVersion}`, () => client.getEffectiveConfig({ name: m.name ?? "" }));
  const [query, setQuery] = useState("");
  const entries = (cfg.data?.entries ?? []).filter((e) => configEntryMatches(e, query));
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
              <Input id="cfg-filter" value={query} onInput={(e) => setQuery(e.currentTarget.value)} placeholder="machine.install" />
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
                    <TD label="Document" class="text-xs">
                      {e.kind}
                      {e.documentName ? `/${e.documentName}` : ""}
                    </TD>
                    <TD label="Field" class="font-mono text-xs break-all">{e.field}</TD>
                    <TD label="Value" class="font-mono text-xs break-all">{e.secret ? <Badge tone="warn">●●●●●● secret (masked)</Badge> : e.valueJson}</TD>
                    <TD label="Set by" class="text-xs">
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
