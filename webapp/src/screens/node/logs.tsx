import { useEffect, useRef, useState } from "preact/hooks";
import type { Client, Machine } from "../../api/generated";
import { defaultLogService, logServices, streamLogs } from "../../lib/logs";
import { Card, CardContent, CardHeader, CardTitle } from "../../components/ui/card";
import { Checkbox, Field, Select } from "../../components/ui/input";
import { ErrorAlert } from "../../components/errors";

/** Logs streams one service's log of the node (the last 200 lines, then following), scrolled to the end. */
export function Logs({ m, client, services }: { m: Machine; client: Client; services: string[] }) {
  const [service, setService] = useState(defaultLogService(services));
  const [lines, setLines] = useState<string[]>([]);
  const [error, setError] = useState<unknown>(null);
  const [follow, setFollow] = useState(true);
  const box = useRef<HTMLPreElement>(null);
  useEffect(() => {
    const ac = new AbortController();
    setLines([]);
    setError(null);
    void streamLogs(client, { name: m.name ?? "", service, tailLines: 200, follow }, setLines, setError, ac.signal);
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
              {logServices(services).map((s) => (
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
