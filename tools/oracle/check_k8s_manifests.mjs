// Checks the Kubernetes manifests of deploy/kubernetes: every document against the Kubernetes
// API's JSON schemas (kubernetes-models), then what the schemas cannot see: probes on the
// server's health endpoints and ports, Prometheus scrape annotations on the metrics port,
// Services that select some workload's pods and name its ports, an autoscaler whose target
// exists and whose custom metric a prometheus-adapter rule makes from a series the server
// exports, and a leader-mode hostfile with one line per StatefulSet pod.
//
// The server runs with API keys: its key file (--api-key-file) must lie in a mounted Secret
// that the manifests define and that holds that file. With --server URL (a server started with
// a key), every probe's health path is fetched WITHOUT a key and must answer 200, as a keyed
// server's pods must become ready on probes that carry none.
//
//   node check_k8s_manifests.mjs DIR [--metrics FILE] [--server URL]
//   (FILE: a /metrics page of the server; URL: e.g. http://127.0.0.1:8000 of a keyed server)
// Exit 0 when every check passes; each failure is printed.
import fs from "node:fs";
import path from "node:path";
import YAML from "yaml";
import { Deployment, StatefulSet } from "kubernetes-models/apps/v1";
import { ConfigMap, Secret, Service } from "kubernetes-models/v1";
import { HorizontalPodAutoscaler } from "kubernetes-models/autoscaling/v2";

const models = {
  "apps/v1/Deployment": Deployment,
  "apps/v1/StatefulSet": StatefulSet,
  "v1/Service": Service,
  "v1/ConfigMap": ConfigMap,
  "v1/Secret": Secret,
  "autoscaling/v2/HorizontalPodAutoscaler": HorizontalPodAutoscaler,
};

const args = process.argv.slice(2);
const dir = args[0];
const metricsFile = args.includes("--metrics") ? args[args.indexOf("--metrics") + 1] : null;
const serverUrl = args.includes("--server") ? args[args.indexOf("--server") + 1] : null;
const failures = [];
let checks = 0;
const check = (ok, what) => {
  ++checks;
  if (!ok) failures.push(what);
};

const docs = [];
for (const file of fs.readdirSync(dir).filter((f) => f.endsWith(".yaml")).sort()) {
  for (const doc of YAML.parseAllDocuments(fs.readFileSync(path.join(dir, file), "utf8"))) {
    if (doc.errors.length) {
      failures.push(`${file}: YAML: ${doc.errors[0].message}`);
      continue;
    }
    const obj = doc.toJS();
    if (obj == null) continue;
    const where = `${file}: ${obj.kind} ${obj.metadata?.name}`;
    const Model = models[`${obj.apiVersion}/${obj.kind}`];
    check(Model !== undefined, `${where}: unknown apiVersion/kind ${obj.apiVersion}/${obj.kind}`);
    if (!Model) continue;
    try {
      new Model(obj).validate();
      ++checks;
    } catch (e) {
      failures.push(`${where}: ${e.message}`);
    }
    docs.push({ file, where, obj });
  }
}

const workloads = docs.filter((d) => ["Deployment", "StatefulSet"].includes(d.obj.kind));
const configMaps = docs.filter((d) => d.obj.kind === "ConfigMap");
const secrets = docs.filter((d) => d.obj.kind === "Secret");
// Health paths the probes fetch, to try on a real server: [where, path].
const probePaths = [];

// Probe helpers: an HTTP probe's path, or the command of an exec probe.
const probeText = (p) => (p?.httpGet ? p.httpGet.path : (p?.exec?.command ?? []).join(" "));
const portNumber = (container, port) =>
  typeof port === "number" ? port : container.ports?.find((p) => p.name === port)?.containerPort;

for (const { where, obj } of workloads) {
  const spec = obj.spec;
  const labels = spec.template.metadata?.labels ?? {};
  for (const [k, v] of Object.entries(spec.selector.matchLabels ?? {})) {
    check(labels[k] === v, `${where}: selector ${k}=${v} does not match the pod labels`);
  }
  const annotations = spec.template.metadata?.annotations ?? {};
  check(annotations["prometheus.io/scrape"] === "true", `${where}: pods lack prometheus.io/scrape: "true"`);
  const server = spec.template.spec.containers[0];
  const ports = server.ports?.map((p) => p.containerPort) ?? [];
  check(ports.includes(Number(annotations["prometheus.io/port"])), `${where}: prometheus.io/port is not a container port`);
  check(annotations["prometheus.io/path"] === "/metrics", `${where}: prometheus.io/path must be /metrics`);
  check(probeText(server.livenessProbe).includes("/v2/health/live"), `${where}: the liveness probe must use /v2/health/live`);
  check(probeText(server.readinessProbe).includes("/v2/health/ready"), `${where}: the readiness probe must use /v2/health/ready`);
  for (const p of [server.livenessProbe, server.readinessProbe, server.startupProbe]) {
    if (p?.httpGet) check(portNumber(server, p.httpGet.port) === 8000, `${where}: an HTTP probe is not on the HTTP port 8000`);
    for (const m of probeText(p).matchAll(/\/v2\/health\/[a-z]+/g)) probePaths.push([where, m[0]]);
  }
  // API keys: the server's command line (its args, or the script its command runs) names a key
  // file inside a mounted Secret that holds it.
  const script = (server.command ?? []).join(" ");
  const scriptText = configMaps
    .flatMap((c) => Object.entries(c.obj.data ?? {}))
    .filter(([name]) => script.includes(name))
    .map(([, text]) => text)
    .join("\n");
  const cmdline = [...(server.command ?? []), ...(server.args ?? [])].join(" ") + "\n" + scriptText;
  const keyFile = /--api-key-file[= ]+["']?([^\s"']+)/.exec(cmdline)?.[1];
  check(keyFile !== undefined, `${where}: the server runs without --api-key-file (anyone who reaches it may call it)`);
  if (keyFile) {
    const mounts = (server.volumeMounts ?? []).filter((m) => keyFile.startsWith(m.mountPath.replace(/\/?$/, "/")));
    const mount = mounts.sort((a, b) => b.mountPath.length - a.mountPath.length)[0];
    check(mount !== undefined, `${where}: the key file ${keyFile} is not under any volumeMount`);
    const volume = mount && (spec.template.spec.volumes ?? []).find((v) => v.name === mount.name);
    check(!mount || volume?.secret, `${where}: the key file ${keyFile} is not mounted from a Secret`);
    if (volume?.secret) {
      const secret = secrets.find((d) => d.obj.metadata?.name === volume.secret.secretName);
      check(secret !== undefined, `${where}: the Secret ${volume.secret.secretName} of the key file is not defined`);
      const file = keyFile.slice(mount.mountPath.replace(/\/?$/, "/").length);
      const items = volume.secret.items;
      const key = items ? items.find((i) => i.path === file)?.key : file;
      const held = { ...(secret?.obj.data ?? {}), ...(secret?.obj.stringData ?? {}) };
      check(!secret || (key !== undefined && key in held), `${where}: the Secret ${volume.secret.secretName} holds no ${file} (the key file ${keyFile})`);
    }
  }
  if (obj.kind === "StatefulSet") {
    // Leader mode: the hostfile lists every pod, in rank order, by its stable name.
    const hostfile = configMaps.map((c) => c.obj.data?.hostfile).find((h) => h);
    check(hostfile !== undefined, `${where}: no ConfigMap holds the MPI hostfile`);
    const hosts = (hostfile ?? "").trim().split("\n").map((l) => l.split(/\s+/)[0]);
    check(hosts.length === spec.replicas, `${where}: the hostfile lists ${hosts.length} hosts for ${spec.replicas} replicas`);
    hosts.forEach((h, i) =>
      check(h === `${obj.metadata.name}-${i}.${spec.serviceName}`, `${where}: hostfile line ${i} is ${h}, not pod ${i}'s name`),
    );
    const entry = configMaps.map((c) => c.obj.data?.["entrypoint.sh"]).find((e) => e) ?? "";
    const world = /--world_size\s+(\d+)/.exec(entry);
    check(world && Number(world[1]) === spec.replicas, `${where}: the launcher's --world_size differs from the replicas`);
  }
}

for (const { where, obj } of docs.filter((d) => d.obj.kind === "Service")) {
  const selector = { ...(obj.spec.selector ?? {}) };
  delete selector["statefulset.kubernetes.io/pod-name"];
  const target = workloads.find(({ obj: w }) =>
    Object.entries(selector).every(([k, v]) => (w.spec.template.metadata?.labels ?? {})[k] === v),
  );
  check(target !== undefined, `${where}: selects no workload's pods`);
  if (!target) continue;
  const containerPorts = target.obj.spec.template.spec.containers.flatMap((c) => c.ports ?? []);
  for (const p of obj.spec.ports) {
    const t = p.targetPort ?? p.port;
    check(containerPorts.some((c) => c.name === t || c.containerPort === t), `${where}: port ${p.name} targets ${t}, which no container has`);
  }
}

const exported = metricsFile
  ? new Set(fs.readFileSync(metricsFile, "utf8").split("\n").filter((l) => l && !l.startsWith("#")).map((l) => l.split(/[{ ]/)[0]))
  : null;
for (const { where, obj } of docs.filter((d) => d.obj.kind === "HorizontalPodAutoscaler")) {
  const ref = obj.spec.scaleTargetRef;
  check(workloads.some((w) => w.obj.kind === ref.kind && w.obj.metadata.name === ref.name), `${where}: scales ${ref.kind} ${ref.name}, which is not defined`);
  for (const m of obj.spec.metrics ?? []) {
    if (m.type !== "Pods") continue;
    const rules = configMaps.map((c) => c.obj.data?.["config.yaml"]).filter((c) => c).flatMap((c) => YAML.parse(c).rules ?? []);
    const rule = rules.find((r) => r.name?.as === m.pods.metric.name);
    check(rule !== undefined, `${where}: no prometheus-adapter rule makes the metric ${m.pods.metric.name}`);
    if (rule && exported) {
      const series = /^([a-zA-Z_:][a-zA-Z0-9_:]*)/.exec(rule.seriesQuery)[1];
      check(exported.has(series), `${where}: the server exports no series ${series}`);
    }
  }
}

if (serverUrl) {
  // The server under test requires a key (else this proves nothing)...
  const guarded = await fetch(`${serverUrl}/v2`).then((r) => r.status, (e) => e.message);
  check(guarded === 401, `${serverUrl}/v2 without a key answered ${guarded}, not 401: start the server with a key`);
  // ...and still answers every probe, which carries none.
  for (const [where, p] of probePaths) {
    const status = await fetch(`${serverUrl}${p}`).then((r) => r.status, (e) => e.message);
    check(status === 200, `${where}: the probe path ${p} answers ${status} without a key: a keyed server's pods would never become ready`);
  }
}

for (const f of failures) console.log(`FAIL ${f}`);
console.log(`${checks - failures.length} passed, ${failures.length} failed`);
process.exit(failures.length ? 1 : 0);
