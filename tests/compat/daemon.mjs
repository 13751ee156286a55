// Starts `keel serve` (the built-in demo model) as a child process, and restarts it after a
// kill -9 on the same address and database, as an operator would.
import { spawn } from "node:child_process";
import { mkdtempSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";

export class Daemon {
  /** `config`: the text of a configuration file for `keel serve --config` (none when empty). */
  constructor(config = "") {
    this.dir = mkdtempSync(join(tmpdir(), "keel-compat-"));
    this.config = config;
    this.listen = "127.0.0.1:0";
    this.child = null;
    this.url = null;
  }

  async start() {
    const keel = process.env.KEEL_BIN;
    if (!keel) throw new Error("KEEL_BIN must name the keel binary");
    const env = { ...process.env, RUST_LOG: "info" };
    for (const key of ["KEEL_CONFIG", "KEEL_LISTEN", "KEEL_DATABASE_URL", "OPENAI_API_KEY", "ANTHROPIC_API_KEY"]) {
      delete env[key];
    }
    const args = ["serve", "--listen", this.listen, "--database", `sqlite://${this.dir}/keel.db`];
    if (this.config) {
      writeFileSync(join(this.dir, "keel.toml"), this.config);
      args.push("--config", join(this.dir, "keel.toml"));
    }
    const child = spawn(keel, args, {
      cwd: this.dir,
      env,
      stdio: ["ignore", "ignore", "pipe"],
    });
    this.child = child;
    this.url = await new Promise((resolve, reject) => {
      let log = "";
      const timer = setTimeout(() => reject(new Error(`keel serve did not start:\n${log}`)), 30000);
      child.stderr.on("data", (chunk) => {
        log += chunk;
        const match = /listening on (http:\/\/[0-9.:]+)/.exec(log);
        if (match) {
          clearTimeout(timer);
          resolve(match[1]);
        }
      });
      child.on("exit", (code) => reject(new Error(`keel serve exited (${code}):\n${log}`)));
    });
    // Restarts keep the address, so clients keep their URLs.
    this.listen = this.url.replace("http://", "");
    return this.url;
  }

  /** kill -9, then waits for the process to be gone. */
  async kill() {
    const child = this.child;
    this.child = null;
    const exited = new Promise((resolve) => child.once("exit", resolve));
    child.kill("SIGKILL");
    await exited;
  }

  async stop() {
    if (this.child) await this.kill();
  }
}

/** Polls `check` until it returns a truthy value (at most `ms`). */
export async function until(check, ms = 30000, what = "condition") {
  const deadline = Date.now() + ms;
  for (;;) {
    const value = await check();
    if (value) return value;
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}`);
    await new Promise((r) => setTimeout(r, 20));
  }
}

/** `n` distinct words: a reply long enough to interrupt at a slow pace. */
export function words(n, prefix = "w") {
  return Array.from({ length: n }, (_, i) => `${prefix}${i}`).join(" ");
}
