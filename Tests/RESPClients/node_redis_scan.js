// node-redis (Debian's node-redis) writes profiles as hashes and walks them back with
// scanIterator, which keeps each SCAN cursor as a JavaScript number: a cursor above 2^53 - 1
// comes back rounded and the scan breaks off. Exits 0 when every key is seen exactly once.
//   node node_redis_scan.js PORT [KEYS [CA]]  (NODE_PATH=/usr/share/nodejs for Debian's package)
// With CA, the connection is TLS and the server's certificate is checked against that file.
'use strict';
const { createClient } = require('redis');

async function main() {
    const port = Number(process.argv[2]);
    const count = Number(process.argv[3] || 300);
    const ca = process.argv[4];
    const socket = ca ? { host: '127.0.0.1', port, tls: true, ca: require('fs').readFileSync(ca) } : { host: '127.0.0.1', port };
    const client = createClient({ socket });
    client.on('error', (error) => { console.error('client error:', error.message); });
    await client.connect();
    const written = new Set();
    for (let i = 0; i < count; i++) {
        const key = `user:node${i}`;
        await client.hSet(key, { name: `Node ${i}`, portraitUri: `https://cdn.example/p/${i}.png` });
        written.add(key);
    }
    const seen = [];
    for await (const key of client.scanIterator({ MATCH: 'user:node*', COUNT: 10 })) seen.push(key);
    await client.quit();
    const distinct = new Set(seen);
    const missing = [...written].filter((key) => !distinct.has(key));
    if (seen.length !== count || distinct.size !== count || missing.length !== 0) {
        console.error(`scanned ${seen.length} keys (${distinct.size} distinct) of ${count}; missing ${missing.slice(0, 5)}`);
        process.exit(1);
    }
    console.log(`ok: ${count} keys scanned`);
}

main().catch((error) => { console.error(error.stack || String(error)); process.exit(1); });
