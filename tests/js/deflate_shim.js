// Preloaded (NODE_OPTIONS=--require) by the permessage-deflate test: the official AMPS
// JavaScript client under Node opens its socket with the `websocket` package, which never
// offers permessage-deflate; a browser's WebSocket does. This gives the client a W3C-style
// WebSocket built on the `ws` package instead, which offers the extension as a browser does,
// so the client's own code runs over a deflated connection. Nothing else of the client changes.
'use strict';

const fs = require('fs');
const Module = require('module');
const WebSocket = require('ws');

// each connection's negotiated extensions (the upgrade response's Sec-WebSocket-Extensions,
// empty when none), one line each, appended to this file
const REPORT = process.env.DEFLATE_SHIM_REPORT;

class DeflatingW3CWebSocket extends WebSocket {
  // the `websocket` package's W3CWebSocket(url, protocols, origin, headers, requestOptions,
  // clientConfig): the client passes its Authorization header there
  constructor(url, protocols, origin, headers) {
    super(url, protocols || [], { headers: headers || {}, perMessageDeflate: true });
    this.on('upgrade', (res) => {
      if (REPORT) fs.appendFileSync(REPORT, `${res.headers['sec-websocket-extensions'] || ''}\n`);
    });
  }
}

const load = Module._load;
Module._load = function (request, parent, isMain) {
  if (request === 'websocket') {
    return { w3cwebsocket: DeflatingW3CWebSocket };
  }
  return load.call(this, request, parent, isMain);
};
