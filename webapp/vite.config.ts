/// <reference types="vitest/config" />
import { defineConfig } from "vite";
import preact from "@preact/preset-vite";
import tailwindcss from "@tailwindcss/vite";

// The build goes straight into the Go embed directory of ichor-ui
// (uiserver/internal/frontend/dist), which is committed: the output must be
// the same bytes on every machine (content hashes only, no timestamps).
// `npm run dev` proxies the API and the sign-in to an ichor-ui started with
// --redirect-uri http://localhost:5173/auth/callback (ICHOR_UI, default
// https://127.0.0.1:8443).
// eslint-disable-next-line no-undef
const backend = (globalThis as { process?: { env: Record<string, string | undefined> } }).process?.env.ICHOR_UI ?? "https://127.0.0.1:8443";

export default defineConfig({
  plugins: [preact({ prerender: { enabled: false } }), tailwindcss()],
  build: {
    outDir: "../uiserver/internal/frontend/dist",
    emptyOutDir: true,
    target: "es2022",
    sourcemap: false,
    reportCompressedSize: true,
    modulePreload: { polyfill: false },
  },
  server: {
    proxy: {
      "/api": { target: backend, secure: false, changeOrigin: true },
      "/oidc": { target: backend, secure: false, changeOrigin: true },
      "/.well-known": { target: backend, secure: false, changeOrigin: true },
    },
  },
  test: {
    environment: "node",
    include: ["src/**/*.test.ts", "src/**/*.test.tsx"],
  },
});
