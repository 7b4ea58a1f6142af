// Injected by test_report_browser.sh before </body> of a copy of a report: draws every <svg> of the
// page (serialised, as an image) and every PNG data URI onto a canvas, and records each one's size,
// its number of distinct colours and its share of non-background pixels; then writes the results
// as JSON into a pre element (id scurry-check) for --dump-dom.
(async function () {
  const results = [];
  function load(url) {
    return new Promise((ok, fail) => {
      const im = new Image();
      im.onload = () => ok(im);
      im.onerror = () => fail(new Error('image failed to load'));
      im.src = url;
    });
  }
  function stats(im, w, h) {
    const c = document.createElement('canvas');
    c.width = w; c.height = h;
    const g = c.getContext('2d');
    g.drawImage(im, 0, 0, w, h);
    const px = g.getImageData(0, 0, w, h).data;
    const colours = new Set();
    let ink = 0;
    for (let i = 0; i < px.length; i += 4) {
      const r = px[i], gg = px[i + 1], b = px[i + 2], a = px[i + 3];
      if (colours.size < 5000) colours.add((r << 16) | (gg << 8) | b | (a << 24));
      if (a > 0 && (r < 235 || gg < 235 || b < 235)) ink++;
    }
    return {colours: colours.size, ink: ink / (w * h)};
  }
  const svgs = Array.from(document.querySelectorAll('svg'));
  for (let k = 0; k < svgs.length; k++) {
    const s = svgs[k];
    const box = s.getBoundingClientRect();
    const title = (s.querySelector('title') || {}).textContent || ('svg ' + k);
    const r = {kind: 'svg', title: title, width: box.width, height: box.height};
    try {
      const xml = new XMLSerializer().serializeToString(s);
      const im = await load('data:image/svg+xml;base64,' + btoa(unescape(encodeURIComponent(xml))));
      Object.assign(r, stats(im, Math.max(1, Math.round(box.width)), Math.max(1, Math.round(box.height))));
    } catch (e) { r.error = String(e); }
    results.push(r);
    const pngs = Array.from(s.querySelectorAll('image'));
    for (const p of pngs) {
      const href = p.getAttribute('href') || '';
      const q = {kind: 'png', title: title, width: 0, height: 0};
      try {
        const im = await load(href);
        q.width = im.naturalWidth; q.height = im.naturalHeight;
        Object.assign(q, stats(im, im.naturalWidth, im.naturalHeight));
      } catch (e) { q.error = String(e); }
      results.push(q);
    }
  }
  for (const im of Array.from(document.querySelectorAll('img'))) {
    const q = {kind: 'img', title: im.alt || im.src.slice(0, 40), width: im.naturalWidth, height: im.naturalHeight};
    try { Object.assign(q, stats(im, im.naturalWidth, im.naturalHeight)); } catch (e) { q.error = String(e); }
    results.push(q);
  }
  // Anything the page loaded from outside itself (data: URIs are not resources; a stylesheet, script,
  // font or image from a file or the network is, loaded or failed).
  for (const e of performance.getEntriesByType('resource')) results.push({kind: 'outside', title: e.name});
  for (const el of Array.from(document.querySelectorAll('[src], [href]'))) {
    const u = el.getAttribute('src') || el.getAttribute('href') || '';
    if (!u.startsWith('data:') && !u.startsWith('#')) results.push({kind: 'outside', title: u});
  }
  const pre = document.createElement('pre');
  pre.id = 'scurry-check';
  pre.textContent = JSON.stringify(results);
  document.body.appendChild(pre);
})();
