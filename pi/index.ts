// pi-krunbox: every tool of the pi coding agent runs in a per-project krunbox microVM.
// pi loads this file through jiti (no build step); see README.md.
export { default } from "./src/extension.ts";
