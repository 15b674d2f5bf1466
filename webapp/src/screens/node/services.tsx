import type { Call } from "../../lib/call";
import type { GetNodeServicesResponse } from "../../api/generated";
import { serviceHealth } from "../../lib/node";
import { timeAgo } from "../../lib/status";
import { Card, CardContent, CardHeader, CardTitle } from "../../components/ui/card";
import { Badge } from "../../components/ui/badge";
import { Table, TBody, TD, TH, THead, TR } from "../../components/ui/table";
import { ErrorAlert } from "../../components/errors";
import { Loading } from "../../components/loading";

/** Services is the node's Talos services: state, health and last event. */
export function Services({ svc }: { svc: Call<GetNodeServicesResponse> }) {
  const services = svc.data?.services ?? [];
  return (
    <Card>
      <CardHeader>
        <CardTitle>Services</CardTitle>
      </CardHeader>
      <CardContent>
        <ErrorAlert error={svc.error} what="Reading the node's services" />
        <Loading when={svc.loading} />
        {svc.data && services.length === 0 && <p class="text-sm text-muted-foreground">The node reports no services.</p>}
        {svc.data && services.length > 0 && (
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
              {services.map((s) => {
                const h = serviceHealth(s);
                return (
                  <TR key={s.id}>
                    <TD label="Service" class="font-medium">{s.id}</TD>
                    <TD label="State">{s.state}</TD>
                    <TD label="Health">
                      <Badge tone={h.tone}>{h.text}</Badge>
                      {h.title && <div class="text-xs text-muted-foreground break-words">{h.title}</div>}
                    </TD>
                    <TD label="Last event" class="text-muted-foreground">
                      {s.lastEvent} {s.lastEventTime && `(${timeAgo(s.lastEventTime)})`}
                    </TD>
                  </TR>
                );
              })}
            </TBody>
          </Table>
        )}
      </CardContent>
    </Card>
  );
}
