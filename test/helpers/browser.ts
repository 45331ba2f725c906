import { existsSync } from 'node:fs'

/** Debian's Chromium (installed by .ci/run where possible); tests skip with a message without it. */
export const CHROMIUM = ['/usr/bin/chromium', '/usr/bin/chromium-browser'].find(p => existsSync(p))

/** Launch flags that keep Chromium off the network this machine does not have. */
export const CHROMIUM_ARGS = [
  '--headless', '--no-sandbox', '--disable-gpu', '--disable-quic', '--no-first-run',
  '--disable-background-networking', '--disable-component-update', '--disable-sync',
  '--disable-dev-shm-usage',
]

export async function launchChromium () {
  const { chromium } = await import('playwright-core')
  return chromium.launch({ executablePath: CHROMIUM, args: CHROMIUM_ARGS, headless: true })
}
