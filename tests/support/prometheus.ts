/** One scrape in Prometheus' text format: samples by name, each with its labels. */
export class Scrape {
  readonly samples: { name: string; labels: Record<string, string>; value: number }[] = [];
  readonly text: string;

  constructor(text: string) {
    this.text = text;
    for (const line of text.split('\n')) {
      if (line === '' || line.startsWith('#')) continue;
      const m = /^([a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{(.*)\})?\s+(\S+)/.exec(line);
      if (!m) throw new Error(`not a sample line: ${line}`);
      const labels: Record<string, string> = {};
      for (const l of (m[2] ?? '').matchAll(/([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\]|\\.)*)"/g)) labels[l[1]!] = l[2]!;
      this.samples.push({ name: m[1]!, labels, value: Number(m[3]) });
    }
  }

  static async of(url: string): Promise<Scrape> {
    const res = await fetch(url);
    if (res.status !== 200) throw new Error(`${url}: HTTP ${res.status}`);
    return new Scrape(await res.text());
  }

  names(): Set<string> {
    return new Set(this.samples.map((s) => s.name));
  }

  /** The sum of every sample of `name` whose labels include `labels` (0 when there is none). */
  value(name: string, labels: Record<string, string> = {}): number {
    return this.samples
      .filter((s) => s.name === name && Object.entries(labels).every(([k, v]) => s.labels[k] === v))
      .reduce((sum, s) => sum + s.value, 0);
  }
}
