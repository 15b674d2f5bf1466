/**
 * readNDJSON reads a body of newline-delimited JSON values (grpc-gateway's
 * server streams) and calls onValue for each complete line.
 */
export async function readNDJSON(body: ReadableStream<Uint8Array>, onValue: (v: unknown) => void): Promise<void> {
  const reader = body.getReader();
  const decoder = new TextDecoder();
  let buf = "";
  for (;;) {
    const { value, done } = await reader.read();
    if (done) break;
    buf += decoder.decode(value, { stream: true });
    buf = drain(buf, onValue);
  }
  buf += decoder.decode();
  if (buf.trim() !== "") onValue(JSON.parse(buf));
}

/** drain calls onValue for each complete line of buf and returns the rest. */
export function drain(buf: string, onValue: (v: unknown) => void): string {
  let nl = buf.indexOf("\n");
  while (nl >= 0) {
    const line = buf.slice(0, nl).trim();
    buf = buf.slice(nl + 1);
    if (line !== "") onValue(JSON.parse(line));
    nl = buf.indexOf("\n");
  }
  return buf;
}
