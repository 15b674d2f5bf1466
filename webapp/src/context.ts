import { createContext } from "preact";
import { useContext } from "preact/hooks";
import type { Client, Cluster, Machine, WhoAmIResponse } from "./api/generated";
import type { Connection } from "./lib/connection";
import type { Downloader } from "./lib/download";

/** Console is what every screen reads: the API client, the user, the cluster and the live machines. */
export interface Console {
  client: Client;
  me: WhoAmIResponse | null;
  cluster: Cluster | null;
  clusterError: unknown;
  refreshCluster: () => void;
  machines: Machine[];
  synced: boolean;
  live: boolean;
  watchError: unknown;
  /** How current the data is: the link to ichor-ui, not the cluster's health. */
  connection: Connection;
  canWrite: boolean;
  /** download fetches an admin download (support bundle, etcd snapshot, packet capture); absent in tests that need none. */
  download?: Downloader;
}

export const ConsoleContext = createContext<Console | null>(null);

export function useConsole(): Console {
  const c = useContext(ConsoleContext);
  if (!c) throw new Error("useConsole outside the console");
  return c;
}
