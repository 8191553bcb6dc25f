/**
 * Next's mock of Google Fonts (NEXT_FONT_GOOGLE_MOCKED_RESPONSES: a module
 * mapping each stylesheet URL to its CSS), for `next build` on a machine with
 * no internet: create-t3-app's layout loads Geist with next/font/google. Every
 * URL gets one @font-face of the family it asks for; Next then stores the
 * font file's URL as its content, a placeholder the browser ignores.
 */
module.exports = new Proxy(
  {},
  {
    get(_target, url) {
      if (typeof url !== 'string' || !url.startsWith('https://fonts.googleapis.com/')) return undefined;
      const family = (new URL(url).searchParams.get('family') ?? 'Mock').split(':')[0];
      return `@font-face {
  font-family: '${family}';
  font-style: normal;
  font-weight: 100 900;
  font-display: swap;
  src: url(https://fonts.gstatic.com/s/mock/${family.replace(/\W/g, '')}.woff2) format('woff2');
}
`;
    },
  },
);
