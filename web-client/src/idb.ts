// The browser's IndexedDB store that the page and its service worker share (a worker cannot
// read the page's localStorage): the device credentials, and at a relay's address the relay
// login's tokens and the machines' pinned keys, so that a notification's action can be
// answered through the relay with the page closed (docs/WEB.md "Through the relay").
const DB = "betcode";
const STORE = "device";

function withStore<T>(mode: IDBTransactionMode, work: (store: IDBObjectStore) => IDBRequest<T> | void): Promise<T | undefined> {
  return new Promise((resolve) => {
    if (typeof indexedDB === "undefined") return resolve(undefined);
    const opening = indexedDB.open(DB, 1);
    opening.onupgradeneeded = () => opening.result.createObjectStore(STORE);
    opening.onerror = () => resolve(undefined);
    opening.onsuccess = () => {
      const transaction = opening.result.transaction(STORE, mode);
      const request = work(transaction.objectStore(STORE));
      transaction.oncomplete = transaction.onerror = () => {
        opening.result.close();
        resolve(request ? (request.result as T | undefined) : undefined);
      };
    };
  });
}

export function idbGet<T>(key: string): Promise<T | undefined> {
  return withStore<T>("readonly", (store) => store.get(key) as IDBRequest<T>);
}

export async function idbPut(key: string, value: unknown): Promise<void> {
  await withStore("readwrite", (store) => void store.put(value, key));
}

export async function idbDelete(key: string): Promise<void> {
  await withStore("readwrite", (store) => void store.delete(key));
}
