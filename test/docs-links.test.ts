// Every relative link of README.md and docs/*.md points at a file that exists and, when it names
// an anchor in a Markdown file, at a heading of that file (GitHub's heading ids). The docs are
// split by topic and link to each other, so a renamed heading or a moved file shows up here.
import t from 'tap'
import { existsSync } from 'node:fs'
import { readdir, readFile } from 'node:fs/promises'
import { dirname, join, relative } from 'node:path'
import { fileURLToPath } from 'node:url'

// Compiled to dist/test/, so the repository is two levels up.
const ROOT = fileURLToPath(new URL('../../', import.meta.url))

/** The text outside fenced code blocks and inline code spans: links are only read there. */
function prose (md: string): string {
  return md.replace(/^```[\s\S]*?^```/gm, '').replace(/`[^`\n]*`/g, '')
}

/** GitHub's id of a heading: lower case, punctuation dropped, spaces to hyphens, repeats numbered. */
export function anchorsOf (md: string): Set<string> {
  const seen = new Map<string, number>()
  const out = new Set<string>()
  for (const line of md.replace(/^```[\s\S]*?^```/gm, '').split('\n')) {
    const m = /^#{1,6}\s+(.*?)\s*#*\s*$/.exec(line)
    if (!m) continue
    const base = m[1].toLowerCase().replace(/[^\p{L}\p{N}\s_-]/gu, '').replace(/\s/g, '-')
    const n = seen.get(base) ?? 0
    seen.set(base, n + 1)
    out.add(n === 0 ? base : `${base}-${n}`)
  }
  return out
}

/** The targets of `[text](target)` and `![alt](target)` links that are not URLs with a scheme. */
export function relativeLinks (md: string): string[] {
  const out: string[] = []
  for (const m of prose(md).matchAll(/!?\[[^\]]*\]\(([^)\s]+)(?:\s+"[^"]*")?\)/g)) {
    if (!/^[a-z][a-z0-9+.-]*:/i.test(m[1])) out.push(m[1])
  }
  return out
}

t.test('the anchor and link readers', async (t) => {
  t.same([...anchorsOf('# Using the API\n## API reference (/v1/docs)\n## Jobs\n## Jobs\n```\n# not a heading\n```\n')],
    ['using-the-api', 'api-reference-v1docs', 'jobs', 'jobs-1'])
  t.same([...anchorsOf("## V8's helper threads\n## Send a test event: `POST /v1/webhooks/{id}/test`\n")],
    ['v8s-helper-threads', 'send-a-test-event-post-v1webhooksidtest'])
  t.same(relativeLinks('[a](api.md#jobs) [b](https://x.io) ![c](d.png) `[e](f.md)`\n```\n[g](h.md)\n```\n'), ['api.md#jobs', 'd.png'])
})

const docs = ['README.md', ...(await readdir(join(ROOT, 'docs'))).filter((f) => f.endsWith('.md')).map((f) => `docs/${f}`)]

t.test('every relative link of README.md and docs/*.md resolves', async (t) => {
  let checked = 0
  for (const doc of docs) {
    const md = await readFile(join(ROOT, doc), 'utf8')
    for (const link of relativeLinks(md)) {
      const [path, anchor] = link.split('#', 2)
      const target = path === '' ? join(ROOT, doc) : join(dirname(join(ROOT, doc)), decodeURIComponent(path))
      const name = relative(ROOT, target)
      checked++
      if (!existsSync(target)) {
        t.fail(`${doc}: ${link} points at ${name}, which does not exist`)
        continue
      }
      if (anchor !== undefined && target.endsWith('.md')) {
        const anchors = anchorsOf(await readFile(target, 'utf8'))
        t.ok(anchors.has(anchor), `${doc}: ${link}: ${name} has a heading #${anchor}`)
      }
    }
  }
  t.ok(checked >= 30, `${checked} links checked`)
})
