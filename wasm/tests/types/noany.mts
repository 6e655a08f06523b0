// The no-`any` check of the consumers (service.mts, lite.mts): `AnyIn<T, 'name'>` is the
// path of every `any` found in T — T itself, a function's parameters (a rest parameter's
// elements among them) and result, every overload's, a constructor's the same way, a
// promise's value, an array's elements, an object's properties (a class's methods among
// them), down to eight levels — and `never` when there is none; `None<…>` turns a path
// into a compile error that names it ("'LockService.holders()[].label' does not satisfy
// the constraint 'never'"). A type deeper than eight levels, and a function of more than
// four overloads, are failures too, never a silent pass. Type-level only: nothing here
// runs.

/** True when T is `any` itself (nothing else is both 0 and 1 & T). */
type IsAny<T> = 0 extends 1 & T ? true : false;
/** One level less: Less[D] for D > 0, never below 0. */
type Less = [never, 0, 1, 2, 3, 4, 5, 6, 7];
/** The standard library's types the declarations name, not looked into: they are not
 * ours, and theirs use `any` (a typed array's `thisArg`, `Response.json()`). (An empty
 * interface such as `WebAssembly.Module` must not be listed: every object extends it.) */
type Builtin = ArrayBuffer | ArrayBufferView | WebAssembly.Memory | Response | Request | URL;

/** True when X and Y are the same type (`any` is the same only as `any`). */
type Same<X, Y> =
  (<G>() => G extends X ? 1 : 2) extends (<G>() => G extends Y ? 1 : 2) ? true : false;
/** A function's signatures as [parameters, result] pairs, every overload's: a pattern of
 * five signatures takes the last five, and with fewer the first one fills the rest (so
 * the first two are the same), or 'more' when the first two differ (five or more). (The
 * standard `Parameters`/`ReturnType` see only the last overload.) */
type Calls<T> = T extends {
  (...a: infer A1): infer R1; (...a: infer A2): infer R2; (...a: infer A3): infer R3;
  (...a: infer A4): infer R4; (...a: infer A5): infer R5;
} ? Same<[A1, R1], [A2, R2]> extends true ? [A2, R2] | [A3, R3] | [A4, R4] | [A5, R5] : 'more'
  : never;
/** The same for a constructor's signatures (a class's `new`). */
type News<T> = T extends {
  new (...a: infer A1): infer R1; new (...a: infer A2): infer R2; new (...a: infer A3): infer R3;
  new (...a: infer A4): infer R4; new (...a: infer A5): infer R5;
} ? Same<[A1, R1], [A2, R2]> extends true ? [A2, R2] | [A3, R3] | [A4, R4] | [A5, R5] : 'more'
  : never;
/** AnyIn of each signature in S (from Calls or News): its parameters and its result. */
type SigsIn<S, P extends string, Stop, D extends number> =
  S extends 'more' ? `${P}: more overloads than the check looks at`
  : S extends [infer A extends readonly unknown[], infer R]
    ? { [I in keyof A]-?: AnyIn<A[I], `${P}(${I & (string | number)})`, Stop, D> }[number]
      | AnyIn<R, `${P}()`, Stop, D>
  : never;

export type AnyIn<T, P extends string, Stop = never, D extends number = 8> =
  IsAny<T> extends true ? P
  // A stop list every type extends would stop everything: name it as a failure.
  : unknown extends Stop ? `${P}: the stop list takes every type`
  : [D] extends [never] ? `${P}: deeper than the check looks`
  // (From here T is one member of a union at a time.) A class in Stop is checked at the
  // top on its own; the library's types are not ours.
  : T extends Builtin | Stop ? never
  : T extends PromiseLike<infer U> ? AnyIn<U, `${P}.then`, Stop, Less[D]>
  : T extends (...args: never) => unknown ? SigsIn<Calls<T>, P, Stop, Less[D]>
  // A class itself (`typeof LockService`): its constructors; its statics are an object.
  : T extends abstract new (...args: never) => unknown ? SigsIn<News<T>, P, Stop, Less[D]>
  : T extends readonly (infer E)[] ? AnyIn<E, `${P}[]`, Stop, Less[D]>
  // An Error's own fields (code, events…); those of Error itself are the library's.
  : T extends Error ? AnyIn<Omit<T, keyof Error>, P, Stop, D>
  : T extends object
    ? {
      [K in keyof T & (string | number)]-?: AnyIn<T[K], `${P}.${K}`, Stop, Less[D]>;
    }[keyof T & (string | number)]
  : never;

/** A compile error naming the path unless T is never. */
export type None<T extends never> = T;
