import { useEffect, useRef } from 'preact/hooks'
import uPlot from 'uplot'

export interface Daily { date: string; requests: number; credits: number; jobs: number }

/** The usage chart (uPlot): requests, credits spent (net of refunds) and jobs per day. */
export function UsageChart ({ daily }: { daily: Daily[] }) {
  const el = useRef<HTMLDivElement>(null)
  useEffect(() => {
    if (!el.current) return
    const xs = daily.map(d => Date.parse(`${d.date}T00:00:00Z`) / 1000)
    const width = Math.max(320, el.current.clientWidth || 720)
    const plot = new uPlot({
      width,
      height: 260,
      tzDate: (ts) => uPlot.tzDate(new Date(ts * 1e3), 'Etc/UTC'),
      scales: { x: { time: true }, credits: { auto: true } },
      axes: [
        {},
        { label: 'requests / jobs', scale: 'y' },
        { label: 'credits', scale: 'credits', side: 1, grid: { show: false } },
      ],
      series: [
        {},
        { label: 'Requests', stroke: '#2563eb', width: 2, scale: 'y' },
        { label: 'Jobs', stroke: '#16a34a', width: 2, scale: 'y' },
        { label: 'Credits spent', stroke: '#dc2626', width: 2, scale: 'credits', fill: 'rgba(220,38,38,0.08)' },
      ],
    }, [xs, daily.map(d => d.requests), daily.map(d => d.jobs), daily.map(d => d.credits)], el.current)
    return () => plot.destroy()
  }, [daily])
  return <div ref={el} class="chart" data-testid="usage-chart" />
}
