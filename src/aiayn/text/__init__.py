"""Text as people write it: paragraphs of several sentences (`sentences`), and HTML pages
(`html_document`). Each splits its input into the sentences a model translates one at a
time, and puts the translations back where the sentences were."""
