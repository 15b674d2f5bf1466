import { useEffect, useState } from "preact/hooks";

/** Call is a read's state: its data once loaded, or its error. */
export interface Call<T> {
  data: T | null;
  error: unknown;
  loading: boolean;
}

/** useCall loads a read once per key, and keeps its error; a read that ends after the key changed is dropped. */
export function useCall<T>(key: string, fn: () => Promise<T>): Call<T> {
  const [state, setState] = useState<Call<T>>({ data: null, error: null, loading: true });
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
