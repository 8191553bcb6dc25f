// create-t3-app with the tanstack variant, as docs/create-t3-app.md sets it up (test/stacks/t3/suite.ts).
import { describeT3App } from './t3/suite.js';

describeT3App('tanstack');
